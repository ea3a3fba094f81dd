"""The asyncio twin of the Flask app: Quart (Flask's API on ASGI) with async views and aiohttp.

A real asyncio model needs this. Flask behind asgiref's WsgiToAsgi runs one request at a time per
worker, and a2wsgi's bridge is a thread pool in disguise; the lab's pitfall models show both.
"""

from __future__ import annotations

import asyncio

import aiohttp
from quart import Quart, Response, request

from servers import common
from servers.dbclient_async import AsyncClients

settings = common.AppSettings.from_env()
databases = AsyncClients(settings)
app = Quart(__name__)
_session: aiohttp.ClientSession | None = None


@app.before_serving
async def open_client() -> None:
    global _session
    _session = aiohttp.ClientSession(
        base_url=settings.upstream_url,
        connector=aiohttp.TCPConnector(limit=settings.pool_size),
        timeout=aiohttp.ClientTimeout(total=settings.timeout_s),
    )
    await databases.open()


@app.after_serving
async def close_client() -> None:
    if _session is not None:
        await _session.close()
    await databases.close()


def respond(payload: bytes, status: int = 200) -> Response:
    return Response(payload, status=status, content_type=common.CONTENT_TYPE)


@app.get("/health")
async def health() -> Response:
    return respond(common.HEALTH_BODY)


@app.get("/io")
async def io() -> Response:
    assert _session is not None, "the client session opens before serving"
    async with _session.get(common.upstream_path(request.args.get("delay_ms"))) as reply:
        await reply.read()
        return respond(*common.io_body(reply.status))


@app.get("/sleep")
async def sleep_view() -> Response:
    ms = int(request.args.get("ms", "100"))
    await asyncio.sleep(ms / 1000)
    return respond(common.body("sleep", ms=ms))


@app.get("/cpu")
async def cpu() -> Response:
    n = int(request.args.get("n", common.DEFAULT_CPU_N))
    return respond(common.body("cpu", n=n, result=common.cpu_work(n)))


@app.get("/db")
async def db() -> Response:
    """pg_sleep(delay_ms) through asyncpg; with upstream_ms, first that long on the upstream."""
    if not settings.db_url:
        return respond(*common.unconfigured("db", "LAB_DB_URL"))
    query = common.DbQuery.of(request.args)
    status = None
    if query.upstream_ms is not None:
        assert _session is not None, "the client session opens before serving"
        async with _session.get(query.upstream_path) as reply:
            await reply.read()
            status = reply.status
    await databases.pg_sleep(query.ms / 1000)
    return respond(query.body(status))


@app.get("/cache")
async def cache() -> Response:
    """A Redis blocking pop that times out after delay_ms, through redis.asyncio."""
    if not settings.redis_url:
        return respond(*common.unconfigured("cache", "LAB_REDIS_URL"))
    ms = common.wait_ms(request.args.get("delay_ms"))
    await databases.redis_wait(ms / 1000)
    return respond(common.body("cache", ms=ms, redis="ok"))
