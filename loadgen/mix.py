"""A user's app under a traffic mix: each request's route drawn by weight, each route's latency
kept apart.

Imports no locust (the lab reads `RouteTally.figures`' shape through the protocol only), so the
closed loop, the open loop and the distributed workers all draw routes the same way.
"""

from __future__ import annotations

import itertools
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from hdrh.histogram import HdrHistogram

from lab.record import hist
from loadgen.protocol import Start
from loadgen.request import Request


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

    def record(self, kind: str | None, latency_ms: float) -> None:
        self.requests += 1
        if kind is None:
            hist.record_ms(self.hist, latency_ms)
        else:
            self.errors[kind] += 1

    def figures(self) -> dict[str, Any]:
        """What `Done.routes` carries for the route: counts and the encoded histogram."""
        return {
            "requests": self.requests,
            "ok": self.hist.get_total_count(),
            "errors": dict(self.errors),
            "histogram": hist.encode(self.hist),
        }
