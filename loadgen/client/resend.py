"""A request sent again when the kept connection it went out on was closed by the server after
its last answer: the lab's engine's client (`loadgen.session.lab_session`), apart from
locust so that it can be imported without gevent's monkey-patching (tests/
test_session_resend.py)."""

from __future__ import annotations

import errno
from typing import Any

from geventhttpclient.client import IDEMPOTENT_METHODS, HTTPClient, HTTPClientPool
from geventhttpclient.response import HTTPConnectionClosed, HTTPSocketPoolResponse


class ResendingClient(HTTPClient):
    """geventhttpclient's client, which also sends a non-idempotent request (a login's POST, a
    mix's write) again, once, on a new connection when the kept connection it went out on turns
    out closed by the server before any answer: what browsers do for any method on a reused
    connection, since the server closed it after its last answer and never read this request.

    uWSGI's --http-socket answers HTTP/1.1 without `Connection: close` and then closes; a client
    that sends its next request before the close arrives reads a reset (tests/
    test_session_resend.py). geventhttpclient sends an idempotent request again itself, never a
    POST. A request that fails on a connection opened for it is never sent again: that failure
    is the server's, and is counted."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.fresh = False  # the last socket the pool handed out was opened for the request
        pool = self._connection_pool
        opener = pool._create_socket

        def opened() -> Any:
            self.fresh = True
            return opener()

        pool._create_socket = opened  # type: ignore[method-assign]

    def request(self, method: str, *args: Any, **kw: Any) -> HTTPSocketPoolResponse:
        self.fresh = False
        try:
            return super().request(method, *args, **kw)
        except (HTTPConnectionClosed, OSError) as e:
            if self.fresh or method.upper() in IDEMPOTENT_METHODS or not _closed_by_peer(e):
                raise
        return super().request(method, *args, **kw)


def _closed_by_peer(error: Exception) -> bool:
    """The connection was closed or reset before any answer (not a timeout or a refusal)."""
    return isinstance(error, HTTPConnectionClosed) or getattr(error, "errno", None) in (
        errno.ECONNRESET,
        errno.EPIPE,
    )


class ResendingPool(HTTPClientPool):
    """The user agent's pool of clients (one per host), each a `ResendingClient`, made with the
    arguments locust gave the pool it replaces."""

    def get_client(self, url: Any) -> HTTPClient:
        key = (url.host, url.port)
        if key not in self.clients:
            self.clients[key] = ResendingClient.from_url(url, **self.client_args)
        return self.clients[key]
