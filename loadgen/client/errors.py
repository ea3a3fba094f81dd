"""Sorting failed requests into the kinds a reader can act on."""

from __future__ import annotations

import socket
from typing import Any

try:  # gevent's own Timeout is what locust's FastHttpUser raises on network timeouts
    from gevent import Timeout as GeventTimeout
except ImportError:  # pragma: no cover - gevent is a locust dependency
    GeventTimeout = TimeoutError


class BadBody(Exception):
    """A 2xx whose body is not the one every model must send (raised through locust's failure)."""


def classify(
    exception: BaseException | None, status: int, body: bytes | None, expected: bytes | None
) -> str | None:
    """The error kind of one request, or None when it succeeded with the expected body."""
    if exception is not None and status == 0:
        return classify_exception(exception)
    if status >= 500:
        return "http_5xx"
    if status >= 400:
        return "http_4xx"
    if exception is not None:
        return classify_exception(exception)
    if expected is not None and body != expected:
        return "bad_body"
    return None


def classify_exception(exception: BaseException) -> str:
    for error in _chain(exception):
        if isinstance(error, BadBody):
            return "bad_body"
        if isinstance(error, ConnectionRefusedError):
            return "refused"
        if isinstance(error, ConnectionResetError | BrokenPipeError | ConnectionAbortedError):
            return "reset"
        if isinstance(error, TimeoutError | socket.timeout | GeventTimeout):
            return "timeout"
        text = type(error).__name__.lower() + " " + str(error).lower()
        if "timed out" in text or "timeout" in text:
            return "timeout"
        if "refused" in text:
            return "refused"
        if "reset" in text or "broken pipe" in text or "closed" in text:
            return "reset"
    return "other"


def _chain(exception: BaseException) -> list[Any]:
    seen: list[BaseException] = []
    current: BaseException | None = exception
    while current is not None and current not in seen:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen
