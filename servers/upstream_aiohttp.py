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

from servers.upstream_routes import CONTROL, match
from servers.upstream_state import SharedState, draw, watch_lag

OK, FAILED = b'{"ok":true}', b'{"ok":false}'


def make_app(state: SharedState, slot: int, rng: random.Random) -> web.Application:
    async def delay(req: web.Request) -> web.Response:
        """Any path but the upstream's own: `/delay?ms=`, else the route's rule, else the
        scenario's delay (as servers.upstream_fast)."""
        method, path = req.method.encode(), req.path.encode()
        if path in CONTROL:
            return web.Response(status=405)
        rule = match(state.rules, method, path)
        try:
            asked = float(req.query["ms"]) if "ms" in req.query and path == b"/delay" else None
        except ValueError:
            return web.json_response({"error": "ms must be a number"}, status=400)
        given = asked if asked is not None else rule.ms if rule is not None else None
        ms, failed = draw(state.current(), rng, given)
        key = method + b" " + (rule.path + b"*" if rule is not None and rule.prefix else path)
        state.begin(slot)
        try:
            await asyncio.sleep(max(ms, 0.0) / 1000)
        finally:
            state.end(slot)
            state.routes.count(slot, key, max(ms, 0.0))
        if failed:
            return web.Response(status=500, body=FAILED, content_type="application/json")
        body = rule.body if rule is not None and rule.body else OK
        kind = "application/json" if body.lstrip()[:1] in (b"{", b"[") else "text/plain"
        return web.Response(status=rule.status if rule else 200, body=body, content_type=kind)

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
            web.get("/stats", stats),
            web.post("/stats/reset", reset),
            web.post("/config", config),
            web.get("/health", health),
            web.route("*", "/{tail:.*}", delay),
        ]
    )
    return app


def serve(state: SharedState, slot: int, sock: socket.socket, rng: random.Random) -> None:
    web.run_app(make_app(state, slot, rng), sock=sock, access_log=None, print=None)
