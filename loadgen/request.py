"""One request a user sends, and its name: `<model> <route>`, one statistics row per model.

Here, apart from the users (loadgen/users.py imports locust, which monkey-patches the process
with gevent on import), so that what only builds requests or reads names (the run parameters, the
live recorder, the lab's UI save) never imports locust.
"""

from __future__ import annotations

import functools
import urllib.parse
from dataclasses import dataclass

from loadgen.protocol import Start


@dataclass(frozen=True)
class Request:
    """What one user sends next: a path with its query, and the body that counts as a success
    (a user's own app may also need a method, a body and headers)."""

    path: str
    expected: bytes | None = None  # None: any 2xx body is a success
    method: str = "GET"
    body: str | None = None
    headers: tuple[tuple[str, str], ...] = ()
    name: str = ""  # a route of a mix: its label, under which its latency is kept

    @classmethod
    def of(cls, start: Start) -> Request:
        """The step's request (the generator's recorder checks bodies, not the user)."""
        body = start.body if start.method != "GET" else None
        return cls(start.path, None, start.method, body, tuple(start.headers.items()))

    @functools.cached_property
    def header_dict(self) -> dict[str, str] | None:
        """The headers as the client takes them, built once per request plan, not per send."""
        return dict(self.headers) or None


@functools.lru_cache(maxsize=256)
def request_name(model: str, path: str) -> str:
    """`<model> <route>`: one statistics row per model and route (the query is left out)."""
    return f"{model} {urllib.parse.urlsplit(path).path}"


def model_of(name: str) -> str:
    """The model a request name belongs to (the inverse of `request_name`)."""
    return name.split(" ", 1)[0]
