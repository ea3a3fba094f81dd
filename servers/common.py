"""What every model's app shares, so the WSGI app and its async twin answer byte-for-byte alike.

Both apps build bodies here and read their settings from the same environment variables, which the
lab sets when it starts a server.
"""

from __future__ import annotations

import json
import os
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass

DEFAULT_CPU_N = 10_000
CONTENT_TYPE = "application/json"


@dataclass(frozen=True)
class AppSettings:
    upstream_url: str  # base URL of the mock upstream, e.g. http://127.0.0.1:18081
    pool_size: int  # outbound connections kept per worker process: size it for the concurrency
    timeout_s: float  # outbound request timeout
    db_url: str = ""  # PostgreSQL URL for /db (LAB_DB_URL); empty: /db answers 503
    redis_url: str = ""  # Redis URL for /cache (LAB_REDIS_URL); empty: /cache answers 503
    db_driver: str = "psycopg2-green"  # WSGI app's PostgreSQL driver, one of DB_DRIVERS
    db_pool: int = 100  # database connections per worker process (each driver's pool)

    @classmethod
    def from_env(cls) -> AppSettings:
        driver = os.environ.get("LAB_DB_DRIVER", "psycopg2-green")
        if driver not in DB_DRIVERS:
            raise ValueError(f"LAB_DB_DRIVER={driver!r}: expected one of {', '.join(DB_DRIVERS)}")
        return cls(
            upstream_url=os.environ.get("LAB_UPSTREAM_URL", "http://127.0.0.1:18081").rstrip("/"),
            pool_size=int(os.environ.get("LAB_POOL_SIZE", "100")),
            timeout_s=float(os.environ.get("LAB_UPSTREAM_TIMEOUT_S", "60")),
            db_url=os.environ.get("LAB_DB_URL", ""),
            redis_url=os.environ.get("LAB_REDIS_URL", ""),
            db_driver=driver,
            db_pool=int(os.environ.get("LAB_DB_POOL", "100")),
        )


# psycopg2 as is (blocks a gevent hub), psycopg2 made cooperative by psycogreen when gevent has
# patched the process, psycopg 3 (gevent-aware from 3.1.14). The asyncio twin always uses asyncpg.
DB_DRIVERS = ("psycopg2", "psycopg2-green", "psycopg")
WAIT_KEY = "lab:never-pushed"  # /cache blocks on this empty list until its timeout


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


def wait_ms(arg: str | None) -> int:
    """Milliseconds a /db or /cache request waits in the database (default 100)."""
    return int(float(arg)) if arg is not None else 100


@dataclass(frozen=True)
class DbQuery:
    """A /db request: `ms` in PostgreSQL's pg_sleep, after `upstream_ms` on the upstream if asked.
    Read and answered here, so both apps and `expected_body` take the query and give the body
    alike."""

    ms: int
    upstream_ms: int | None

    @classmethod
    def of(cls, args: Mapping[str, str]) -> DbQuery:
        up = args.get("upstream_ms")
        return cls(wait_ms(args.get("delay_ms")), None if up is None else wait_ms(up))

    @property
    def upstream_path(self) -> str:
        return upstream_path(str(self.upstream_ms))

    def body(self, upstream_status: int | None = None) -> bytes:
        """The answer: how long it slept in PostgreSQL and, if asked, on the upstream first."""
        if self.upstream_ms is None:
            return body("db", ms=self.ms, postgres="ok")
        return body(
            "db",
            ms=self.ms,
            postgres="ok",
            upstream="ok" if upstream_status == 200 else "error",
            upstream_ms=self.upstream_ms,
        )


def unconfigured(route: str, variable: str) -> tuple[bytes, int]:
    """503 for a database route whose database the lab did not set up."""
    return body(route, error=f"{variable} is not set"), 503


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
        case "/db":
            return DbQuery.of(query).body(200)
        case "/cache":
            return body("cache", ms=wait_ms(query.get("delay_ms")), redis="ok")
    return HEALTH_BODY
