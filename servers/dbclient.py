"""The WSGI app's database clients: PostgreSQL through the chosen driver, Redis through redis-py.

Which driver is the experiment: psycopg2 is a C extension whose socket waits gevent cannot see, so
under a gevent worker one `pg_sleep` blocks every greenlet of the process; psycogreen installs a
wait callback that yields to the hub instead; psycopg 3 (3.1.14+) is gevent-aware by itself. The
psycogreen patch is applied at app import, after the server's gevent monkey-patch, and only in a
patched process (a threads worker keeps psycopg2's own blocking waits, which is right there).

Each pool holds at most LAB_DB_POOL connections per process and makes extra requests wait for one
(the lab reports a pool smaller than the users as the limit), rather than failing them.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

from servers import common

PostgresConnect = Callable[[], Any]


class Pool:
    """At most `size` connections; a request finding none free waits up to `timeout_s`.

    Built on threading primitives, which gevent's monkey-patch makes cooperative.
    """

    def __init__(self, connect: PostgresConnect, size: int, timeout_s: float) -> None:
        self._connect = connect
        self._slots = threading.BoundedSemaphore(size)
        self._idle: list[Any] = []
        self._timeout_s = timeout_s

    @contextlib.contextmanager
    def connection(self) -> Iterator[Any]:
        if not self._slots.acquire(timeout=self._timeout_s):
            raise TimeoutError(f"no database connection free within {self._timeout_s:g} s")
        conn = None
        try:
            conn = self._idle.pop() if self._idle else self._connect()
            yield conn
            self._idle.append(conn)
            conn = None
        finally:
            if conn is not None:  # broken mid-request: never hand it out again
                with contextlib.suppress(Exception):
                    conn.close()
            self._slots.release()


def green_psycopg2(driver: str) -> bool:
    """Make psycopg2 cooperative with psycogreen, if asked and gevent has patched this process."""
    if driver != "psycopg2-green":
        return False
    try:
        from gevent import monkey
    except ImportError:
        return False
    if not monkey.is_module_patched("socket"):
        return False
    import psycogreen.gevent

    psycogreen.gevent.patch_psycopg()
    return True


def connector(settings: common.AppSettings) -> PostgresConnect:
    """A function opening one autocommit connection with the configured driver."""
    if settings.db_driver == "psycopg":
        import psycopg

        return lambda: psycopg.connect(settings.db_url, autocommit=True)
    import psycopg2

    def connect() -> Any:
        conn = psycopg2.connect(settings.db_url)
        conn.autocommit = True
        return conn

    return connect


class Clients:
    """The process's PostgreSQL pool and Redis client, created on first use (never across fork)."""

    def __init__(self, settings: common.AppSettings) -> None:
        self.settings = settings
        self._pg: Pool | None = None
        self._redis: Any = None

    def pg_sleep(self, seconds: float) -> None:
        if self._pg is None:
            s = self.settings
            self._pg = Pool(connector(s), s.db_pool, s.timeout_s)
        with self._pg.connection() as conn, conn.cursor() as cur:
            cur.execute("SELECT pg_sleep(%s)", (seconds,))
            cur.fetchall()

    def redis_wait(self, seconds: float) -> None:
        """BLPOP on a list nobody pushes to: the server holds the request for `seconds`."""
        if self._redis is None:
            import redis

            pool = redis.BlockingConnectionPool.from_url(
                self.settings.redis_url,
                max_connections=self.settings.db_pool,
                timeout=self.settings.timeout_s,
            )
            self._redis = redis.Redis(connection_pool=pool)
        self._redis.blpop([common.WAIT_KEY], timeout=seconds)
