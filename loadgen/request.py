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

from lab.record import hist
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


class Picker:
    """The next request of a step: its one route, or a route of the mix drawn by weight."""

    def __init__(self, start: Start, seed: int | None = None) -> None:
        body = start.body
        headers = tuple(start.headers.items())
        self.requests = tuple(
            Request(
                r["path"],
                None,
                r["method"],
                body if r["method"] != "GET" else None,
                headers,
                name=r["label"],
            )
            for r in start.mix
        ) or (Request.of(start),)
        self.cumulative = list(itertools.accumulate(float(r["weight"]) for r in start.mix))
        self.rng = random.Random(seed)

    @property
    def names(self) -> frozenset[str]:
        """The routes whose latencies are kept apart (none for one route: the step's is its)."""
        return frozenset(r.name for r in self.requests) if len(self.requests) > 1 else frozenset()

    def next(self) -> Request:
        if len(self.requests) == 1:
            return self.requests[0]
        return self.rng.choices(self.requests, cum_weights=self.cumulative)[0]


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
