"""The lab's one small HTTP client for its own requests (checks, probes, readiness, control)."""

from __future__ import annotations

import http.client
import time
import urllib.parse
from collections.abc import Mapping

SERVING_BELOW = 500  # a status under this says the server is up (see `serving`)


def serving(status: int) -> bool:
    """Whether an answer says the server is up and its app answering: any status under 500.
    A redirect to a login page or a 401 from a route behind the login is the app answering
    (the lab polls without a session); a 5xx is an app or proxy not serving yet (nginx's 502
    before its backend listens, a 503 while a worker loads)."""
    return status < SERVING_BELOW


def get(
    base_url: str,
    path: str,
    timeout_s: float = 30.0,
    method: str = "GET",
    data: bytes | None = None,
    headers: Mapping[str, str] | None = None,
) -> tuple[int, bytes, float]:
    """(status, body, seconds) of one request on a fresh connection: the lab's one HTTP client
    for its own requests (checks, probes, readiness, control), not for measured load."""
    url = urllib.parse.urlsplit(base_url)
    conn = http.client.HTTPConnection(url.hostname or "127.0.0.1", url.port, timeout=timeout_s)
    start = time.monotonic()
    try:
        conn.request(method, path, body=data, headers=dict(headers or {}))
        reply = conn.getresponse()
        return reply.status, reply.read(), time.monotonic() - start
    finally:
        conn.close()
