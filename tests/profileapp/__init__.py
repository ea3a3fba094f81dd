"""The profiler's real cases: an ASGI app (no framework) whose one route blocks its event loop
in `time.sleep` and whose other computes a JSON body (CPU-bound, not blocking)."""

from __future__ import annotations

import json
import time
from typing import Any

PAYLOAD = [{"id": i, "name": f"item {i}", "tags": ["a", "b", "c"]} for i in range(300)]


def sleepy() -> bytes:
    time.sleep(0.005)  # the mistake: a blocking sleep on the loop's own thread
    return b"slept"


def encoded() -> bytes:
    return json.dumps(PAYLOAD).encode()


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    body = sleepy() if scope["path"] == "/sleep" else encoded()
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": body})
