"""What every model's app shares, so the WSGI app and its async twin answer byte-for-byte alike.

Both apps build bodies here and read their settings from the same environment variables, which the
lab sets when it starts a server.
"""

from __future__ import annotations

import json
import os
import urllib.parse
from dataclasses import dataclass

DEFAULT_CPU_N = 10_000
CONTENT_TYPE = "application/json"


@dataclass(frozen=True)
class AppSettings:
    upstream_url: str  # base URL of the mock upstream, e.g. http://127.0.0.1:18081
    pool_size: int  # outbound connections kept per worker process: size it for the concurrency
    timeout_s: float  # outbound request timeout

    @classmethod
    def from_env(cls) -> AppSettings:
        return cls(
            upstream_url=os.environ.get("LAB_UPSTREAM_URL", "http://127.0.0.1:18081").rstrip("/"),
            pool_size=int(os.environ.get("LAB_POOL_SIZE", "100")),
            timeout_s=float(os.environ.get("LAB_UPSTREAM_TIMEOUT_S", "60")),
        )


def body(route: str, **fields: object) -> bytes:
    """A compact, key-sorted JSON body ending in a newline."""
    return (
        json.dumps({"route": route, **fields}, sort_keys=True, separators=(",", ":")) + "\n"
    ).encode()


def cpu_work(n: int) -> int:
    """A fixed amount of pure-Python CPU work whose result proves it ran."""
    return sum(i * i for i in range(n)) % 1_000_003


def upstream_path(delay_ms: str | None) -> str:
    """The upstream request for `/io`: an explicit delay, or the upstream's configured default."""
    return "/delay" if delay_ms is None else f"/delay?ms={int(float(delay_ms))}"


def io_body(status: int) -> tuple[bytes, int]:
    """The `/io` answer for an upstream status: 200 passes through, anything else becomes a 502."""
    if status == 200:
        return body("io", upstream="ok"), 200
    return body("io", upstream=f"error {status}"), 502


HEALTH_BODY = body("health", status="ok")


def expected_body(path: str) -> bytes:
    """The exact body every model must return for a path the lab requests.

    Here, not in the lab, so that load generators (which must not import the lab) check bodies
    with the very same rule as the lab's preflight.
    """
    url = urllib.parse.urlsplit(path)
    query = dict(urllib.parse.parse_qsl(url.query))
    match url.path:
        case "/io":
            return body("io", upstream="ok")
        case "/sleep":
            return body("sleep", ms=int(query.get("ms", "100")))
        case "/cpu":
            n = int(query.get("n", DEFAULT_CPU_N))
            return body("cpu", n=n, result=cpu_work(n))
    return HEALTH_BODY
