"""One request a user sends, and its name: `<model> <route>`, one statistics row per model; a
traffic mix's next request drawn by weight (`Picker`), and each route's latency kept apart
(`RouteTally`), the same in the closed loop, the open loop and the distributed workers.

Here, apart from the users (loadgen/users.py imports locust, which monkey-patches the process
with gevent on import), so that what only builds requests or reads names (the run parameters, the
live recorder, the lab's UI save) never imports locust.
"""

from __future__ import annotations

import functools
import itertools
import random
import urllib.parse
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from hdrh.histogram import HdrHistogram

from lab.record import hist, placeholders
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


@dataclass(frozen=True)
class Planned:
    """One route of the step compiled once: its request as sent when nothing in it is a
    placeholder (`lab.record.placeholders`), else the templates filled per request."""

    request: Request
    expect: frozenset[int]  # the statuses that count as its success (empty: any below 400)
    path: placeholders.Template
    headers: tuple[tuple[str, placeholders.Template], ...]
    body: placeholders.Template | None

    @classmethod
    def of(cls, route: dict[str, Any], name: str) -> Planned:
        method, body = route["method"], route.get("body")
        body = body if method != "GET" else None
        pairs = tuple((str(k), str(v)) for k, v in route.get("headers") or ())
        request = Request(route["path"], None, method, body, pairs, name=name)
        where = name or route["path"]
        kind = "json" if body is not None and placeholders.is_json(body) else "text"
        return cls(
            request,
            frozenset(route.get("expect") or ()),
            placeholders.compile_text(route["path"], where, "path"),
            tuple((k, placeholders.compile_text(v, where, "header")) for k, v in pairs),
            placeholders.compile_text(body, where, kind) if body is not None else None,
        )

    @functools.cached_property
    def static(self) -> bool:
        texts = (self.path, *(t for _, t in self.headers), *([self.body] if self.body else []))
        return all(t.static for t in texts)

    def filled(self, source: placeholders.Source, user: int) -> Request:
        """The request to send now: the very same one where nothing varies."""
        if self.static:
            return self.request
        values = placeholders.Values(source, user)
        body = values.fill(self.body) if self.body is not None else None
        headers = tuple((k, values.fill(t)) for k, t in self.headers)
        r = self.request
        return Request(values.fill(self.path), None, r.method, body, headers, name=r.name)


class Picker:
    """The next request of a step: its one route, or a route of the mix drawn by weight, with
    its placeholders filled from this generator's own values."""

    def __init__(self, start: Start, seed: int | None = None) -> None:
        one: dict[str, Any] = {"path": start.path, "method": start.method, "body": start.body}
        one["headers"] = list(start.headers.items())
        routes = start.mix or [one]
        self.planned = tuple(Planned.of(r, r.get("label", "") if start.mix else "") for r in routes)
        self.requests = tuple(p.request for p in self.planned)
        self.cumulative = list(itertools.accumulate(float(r["weight"]) for r in start.mix))
        self.rng = random.Random(seed)
        self.source = placeholders.Source(start.n_base, start.n_index, start.n_stride, seed)

    @property
    def names(self) -> frozenset[str]:
        """The routes whose latencies are kept apart (none for one route: the step's is its)."""
        return frozenset(r.name for r in self.requests) if len(self.requests) > 1 else frozenset()

    @property
    def expect(self) -> dict[str, frozenset[int]]:
        """Each route's statuses that count as success, where it names any."""
        return {p.request.name: p.expect for p in self.planned if p.expect}

    def next(self, user: int = 0) -> Request:
        """The next request, `user`: the simulated user's number ({user})."""
        if len(self.planned) == 1:
            return self.planned[0].filled(self.source, user)
        planned = self.rng.choices(self.planned, cum_weights=self.cumulative)[0]
        return planned.filled(self.source, user)


@dataclass
class RouteTally:
    """One route's measured requests: answers' latency (an HdrHistogram), failures by kind."""

    hist: HdrHistogram = field(default_factory=hist.new_histogram)
    requests: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    unfinished: int = 0  # sent inside the window, still unanswered at the cut-off

    def record(self, kind: str | None, latency_ms: float) -> None:
        self.requests += 1
        if kind is None:
            hist.record_ms(self.hist, latency_ms)
        else:
            self.errors[kind] += 1

    def bound(self) -> None:
        """A request of this route unanswered at the cut-off: counted, with no latency (the
        step's histogram keeps its age as a lower bound), so the routes add up to the step."""
        self.requests += 1
        self.unfinished += 1

    def add(self, other: RouteTally) -> None:
        self.hist.add(other.hist)
        self.requests += other.requests
        self.errors.update(other.errors)
        self.unfinished += other.unfinished

    @classmethod
    def of(cls, figures: dict[str, Any]) -> RouteTally:
        """The tally `figures` sent (a worker's, to its master)."""
        return cls(
            hist.decode(figures["histogram"]),
            figures["requests"],
            Counter(figures["errors"]),
            figures.get("unfinished", 0),
        )

    def figures(self) -> dict[str, Any]:
        """What `Done.routes` carries for the route: counts and the encoded histogram."""
        return {
            "requests": self.requests,
            "ok": self.hist.get_total_count(),
            "errors": dict(self.errors),
            "unfinished": self.unfinished,
            "histogram": hist.encode(self.hist),
        }
