"""The upstream's lean engine: a raw asyncio protocol on uvloop, parsing HTTP with httptools.

Why: the upstream must never be what limits a model. aiohttp spends most of its ~0.17 ms of CPU
per request on its request/response objects and routing; here a request is a parser callback and a
timer, and the answer is a pre-built byte string. Both libraries are C (libuv, llhttp) and already
installed with uvicorn[standard], so nothing has to be compiled. Responses keep HTTP/1.1 order on a
connection even if a client pipelines.
"""

from __future__ import annotations

import asyncio
import http
import json
import random
import socket
from collections import deque
from functools import cache

import httptools
import uvloop

from servers.upstream_routes import CONTROL, Rule, match
from servers.upstream_state import SharedState, draw, watch_lag

JSON, TEXT = b"application/json", b"text/plain; charset=utf-8"
OK, FAILED = b'{"ok":true}', b'{"ok":false}'


def reason(status: int) -> str:
    try:
        return http.HTTPStatus(status).phrase
    except ValueError:
        return "Unknown"


@cache
def response(status: int, body: bytes, content_type: bytes, keep_alive: bool) -> bytes:
    head = f"HTTP/1.1 {status} {reason(status)}\r\nContent-Length: {len(body)}\r\n".encode()
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
        control = CONTROL.get(path)
        if control is None:  # any other path and method: an API the app calls
            return self.delay(conn, method, path, query)
        if control != method:
            return conn.answer(405, b"", TEXT)
        if path == b"/health":
            return conn.answer(200, b"ok", TEXT)
        handlers = {
            b"/stats": self.state.stats,
            b"/stats/reset": self.state.reset,
            b"/config": lambda: self.config(body),
        }
        conn.answer(200, json.dumps(handlers[path]()).encode(), JSON)

    def config(self, body: bytes) -> dict[str, object]:
        try:
            return self.state.configure(json.loads(body or b"{}"))
        except (ValueError, TypeError, AttributeError) as e:
            return {"error": str(e)}

    def delay(self, conn: Connection, method: bytes, path: bytes, query: bytes) -> None:
        """The wait `/delay?ms=` asks for, else its route's rule's, else the scenario's."""
        rule = match(self.state.rules, method, path)
        try:
            asked = asked_ms(query) if path == b"/delay" else None
        except ValueError:
            return conn.answer(400, b'{"error":"ms must be a number"}', JSON)
        ms, failed = draw(
            self.state.current(), self.rng, asked if asked is not None else rule_ms(rule)
        )
        self.state.begin(self.slot)
        ticket = conn.reserve()
        key = method + b" " + (rule.path + b"*" if rule is not None and rule.prefix else path)
        self.loop.call_later(max(ms, 0.0) / 1000, self.finish, conn, ticket, failed, rule, key, ms)

    def finish(
        self,
        conn: Connection,
        ticket: list[bytes],
        failed: bool,
        rule: Rule | None,
        key: bytes,
        ms: float,
    ) -> None:
        self.state.end(self.slot)
        self.state.routes.count(self.slot, key, max(ms, 0.0))
        if failed:
            conn.fill(ticket, 500, FAILED, JSON)
        elif rule is not None:
            conn.fill(ticket, rule.status, rule.body or OK, body_type(rule.body))
        else:
            conn.fill(ticket, 200, OK, JSON)


def rule_ms(rule: Rule | None) -> float | None:
    return rule.ms if rule is not None else None


def body_type(body: bytes) -> bytes:
    """A rule's body is JSON where it looks like JSON, else text (b"": the default JSON)."""
    return JSON if not body or body.lstrip()[:1] in (b"{", b"[") else TEXT


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
