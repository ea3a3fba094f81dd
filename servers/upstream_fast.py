"""The upstream's lean engine: a raw asyncio protocol on uvloop, parsing HTTP with httptools.

Why: the upstream must never be what limits a model. aiohttp spends most of its ~0.17 ms of CPU
per request on its request/response objects and routing; here a request is a parser callback and a
timer, and the answer is a pre-built byte string. Both libraries are C (libuv, llhttp) and already
installed with uvicorn[standard], so nothing has to be compiled. Responses keep HTTP/1.1 order on a
connection even if a client pipelines.
"""

from __future__ import annotations

import asyncio
import json
import random
import socket
from collections import deque
from functools import cache

import httptools
import uvloop

from servers.upstream_state import SharedState, draw, watch_lag

REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    500: "Internal Server Error",
}
JSON, TEXT = b"application/json", b"text/plain; charset=utf-8"


@cache
def response(status: int, body: bytes, content_type: bytes, keep_alive: bool) -> bytes:
    head = f"HTTP/1.1 {status} {REASONS[status]}\r\nContent-Length: {len(body)}\r\n".encode()
    close = b"" if keep_alive else b"Connection: close\r\n"
    return head + b"Content-Type: " + content_type + b"\r\n" + close + b"\r\n" + body


def asked_ms(query: bytes) -> float | None:
    """The `ms` query parameter of `/delay`, if given (ValueError if not a number)."""
    for part in query.split(b"&"):
        if part.startswith(b"ms="):
            return float(part[3:])
    return None


class Engine:
    """One process's request handling: routes, counters, timers."""

    def __init__(self, state: SharedState, slot: int, rng: random.Random) -> None:
        self.state, self.slot, self.rng = state, slot, rng
        self.loop = asyncio.get_event_loop()

    def dispatch(self, conn: Connection, method: bytes, url: bytes, body: bytes) -> None:
        path, _, query = url.partition(b"?")
        route = (method, path)
        if route == (b"GET", b"/delay"):
            return self.delay(conn, query)
        if route == (b"GET", b"/health"):
            return conn.answer(200, b"ok", TEXT)
        handlers = {
            (b"GET", b"/stats"): self.state.stats,
            (b"POST", b"/stats/reset"): self.state.reset,
            (b"POST", b"/config"): lambda: self.config(body),
        }
        if route in handlers:
            return conn.answer(200, json.dumps(handlers[route]()).encode(), JSON)
        known = {p for _, p in handlers} | {b"/delay", b"/health"}
        conn.answer(405 if path in known else 404, b"", TEXT)

    def config(self, body: bytes) -> dict[str, object]:
        try:
            return self.state.configure(json.loads(body or b"{}"))
        except (ValueError, TypeError, AttributeError) as e:
            return {"error": str(e)}

    def delay(self, conn: Connection, query: bytes) -> None:
        try:
            ms, failed = draw(self.state.current(), self.rng, asked_ms(query))
        except ValueError:
            return conn.answer(400, b'{"error":"ms must be a number"}', JSON)
        self.state.begin(self.slot)
        ticket = conn.reserve()
        self.loop.call_later(max(ms, 0.0) / 1000, self.finish, conn, ticket, failed)

    def finish(self, conn: Connection, ticket: list[bytes], failed: bool) -> None:
        self.state.end(self.slot)
        if failed:
            conn.fill(ticket, 500, b'{"ok":false}', JSON)
        else:
            conn.fill(ticket, 200, b'{"ok":true}', JSON)


class Connection(asyncio.Protocol):
    """One client connection: feeds httptools, answers in request order."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.parser = httptools.HttpRequestParser(self)
        self.url = b""
        self.body: list[bytes] = []
        self.pending: deque[list[bytes]] = deque()  # [response] once ready, [] while waiting
        self.keep_alive = True
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None  # timers still fire and count; their answers are dropped

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self.keep_alive = False
            self.answer(400, b"bad request", TEXT)

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        url, body = self.url, b"".join(self.body)
        self.url, self.body = b"", []
        self.keep_alive = self.keep_alive and self.parser.should_keep_alive()
        self.engine.dispatch(self, self.parser.get_method(), url, body)

    def reserve(self) -> list[bytes]:
        ticket: list[bytes] = []
        self.pending.append(ticket)
        return ticket

    def answer(self, status: int, body: bytes, content_type: bytes) -> None:
        self.fill(self.reserve(), status, body, content_type)

    def fill(self, ticket: list[bytes], status: int, body: bytes, content_type: bytes) -> None:
        ticket.append(response(status, body, content_type, self.keep_alive))
        while self.pending and self.pending[0] and self.transport is not None:
            self.transport.write(self.pending.popleft()[0])
        if not self.keep_alive and not self.pending and self.transport is not None:
            self.transport.close()


def serve(state: SharedState, slot: int, sock: socket.socket, rng: random.Random) -> None:
    async def main() -> None:
        engine = Engine(state, slot, rng)
        server = await engine.loop.create_server(lambda: Connection(engine), sock=sock)
        lag = asyncio.create_task(watch_lag(state, slot))
        async with server:
            await server.serve_forever()
        lag.cancel()

    uvloop.run(main())
