"""The upstream's fallback engine: aiohttp, the original implementation.

Kept because it needs only aiohttp (no uvloop or httptools) and as the baseline the benchmark
compares the lean engine with (benchmarks/upstream_capacity.py).
"""

from __future__ import annotations

import asyncio
import json
import random
import socket
from collections.abc import AsyncIterator

from aiohttp import web

from servers.upstream_state import SharedState, draw, watch_lag

OK, FAILED = b'{"ok":true}', b'{"ok":false}'


def make_app(state: SharedState, slot: int, rng: random.Random) -> web.Application:
    async def delay(req: web.Request) -> web.Response:
        state.begin(slot)
        try:
            asked = float(req.query["ms"]) if "ms" in req.query else None
            ms, failed = draw(state.current(), rng, asked)
            await asyncio.sleep(ms / 1000)
            return web.Response(
                status=500 if failed else 200,
                body=FAILED if failed else OK,
                content_type="application/json",
            )
        finally:
            state.end(slot)

    async def stats(_: web.Request) -> web.Response:
        return web.json_response(state.stats())

    async def reset(_: web.Request) -> web.Response:
        return web.json_response(state.reset())

    async def config(req: web.Request) -> web.Response:
        return web.json_response(state.configure(json.loads(await req.read() or b"{}")))

    async def health(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def lag(_: web.Application) -> AsyncIterator[None]:
        task = asyncio.create_task(watch_lag(state, slot))
        yield
        task.cancel()

    app = web.Application()
    app.cleanup_ctx.append(lag)
    app.add_routes(
        [
            web.get("/delay", delay),
            web.get("/stats", stats),
            web.post("/stats/reset", reset),
            web.post("/config", config),
            web.get("/health", health),
        ]
    )
    return app


def serve(state: SharedState, slot: int, sock: socket.socket, rng: random.Random) -> None:
    web.run_app(make_app(state, slot, rng), sock=sock, access_log=None, print=None)
