"""The route of Granian's "Long I/O" benchmark (benchmarks/app/wsgi.py and asgi.py there).

`/io10` and `/io100` wait 10 ms and 100 ms and answer 200 with a 10-byte plain-text body: the
WSGI app with `time.sleep` (so a thread, or a greenlet where gevent patched it, is held for the
wait), the ASGI app with `asyncio.sleep`. Like the harness, the WSGI app sends its status before
it sleeps, and any other path is a 404. `/health` answers at once, so readiness checks never wait
behind a sleeping request.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

BODY = b"x" * 10
HEADERS = [("content-type", "text/plain; charset=utf-8")]
WAITS_S = {"/io10": 0.010, "/io100": 0.100, "/health": 0.0}

Send = Callable[[dict[str, Any]], Awaitable[None]]


def wsgi_app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    wait = WAITS_S.get(environ["PATH_INFO"])
    if wait is None:
        start_response("404 NOT FOUND", HEADERS)
        return [b"not found"]
    start_response("200 OK", HEADERS)
    if wait:
        time.sleep(wait)
    return [BODY]


async def asgi_app(scope: dict[str, Any], receive: Any, send: Send) -> None:
    if scope["type"] != "http":  # lifespan: nothing to set up
        return
    wait = WAITS_S.get(scope["path"])
    status = 404 if wait is None else 200
    headers = [(k.encode(), v.encode()) for k, v in HEADERS]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    if wait:
        await asyncio.sleep(wait)
    await send({"type": "http.response.body", "body": BODY if status == 200 else b"not found"})
