"""The asyncio twin's database clients: asyncpg for PostgreSQL, redis.asyncio for Redis.

Both are created when serving starts (inside the worker's event loop) and closed when it ends;
their pools hold at most LAB_DB_POOL connections and make extra requests wait, as the WSGI side.
Neither connects before its first request (asyncpg's min_size=0), so a server starts even when its
database is not up yet, as under Compose, where the `databases` profile may not be running.
"""

from __future__ import annotations

from typing import Any

from servers import common


class AsyncClients:
    def __init__(self, settings: common.AppSettings) -> None:
        self.settings = settings
        self._pg: Any = None
        self._redis: Any = None

    async def open(self) -> None:
        s = self.settings
        if s.db_url:
            import asyncpg

            self._pg = await asyncpg.create_pool(s.db_url, min_size=0, max_size=s.db_pool)
        if s.redis_url:
            import redis.asyncio

            pool = redis.asyncio.BlockingConnectionPool.from_url(
                s.redis_url, max_connections=s.db_pool, timeout=s.timeout_s
            )
            self._redis = redis.asyncio.Redis(connection_pool=pool)

    async def close(self) -> None:
        if self._pg is not None:
            await self._pg.close()
        if self._redis is not None:
            await self._redis.aclose()

    async def pg_sleep(self, seconds: float) -> None:
        await self._pg.execute("SELECT pg_sleep($1)", seconds)

    async def redis_wait(self, seconds: float) -> None:
        await self._redis.blpop([common.WAIT_KEY], timeout=seconds)
