"""Requests held through a pause: answers whose latency lies far above the rest.

Why beside the answers per 100 ms (`lab.verdict.pauses`): at a few users the bins hold too few
answers to tell a quiet stretch from chance, yet every request in flight when the server stopped
waited the pause through. In closed loop they answer together, about a pause's length after they
were sent, so the step's distribution (`StepRecord.answers_by_latency`) shows them as a group far
above the bulk, an empty stretch between: their latency is the pause's length (and half a
request's time: `Cluster.pause_ms`), their number
(each pause holds about one request a user) its count, and the seconds whose slowest answer lies
in the group (`timeseries["max_ms"]`) when each pause ended.

A cluster is what lies above the lowest split of the distribution where the bulk below holds
more than half of the answers (it is the step's typical latency), and the group above starts at
the least pause (shorter: a request's own wait) and at `T.pause_cluster_gap` times the bulk's
greatest latency or more (the empty stretch). Open loop: arrivals during a pause wait from its
length down to nothing, so the held requests reach down into the bulk with no empty stretch;
there only the bins (and `held`, their corroboration) tell a pause.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from lab.record.hist import COARSE_STEP
from lab.record.thresholds import T

Spread = Sequence[tuple[float, int]]  # `StepRecord.answers_by_latency`: (upper edge ms, count)


@dataclass(frozen=True)
class Cluster:
    count: int  # answers in the group
    least_ms: float  # its least latency (its lowest bin's lower edge, whole ms down)
    median_ms: float  # its median answer's latency (the middle of that bin: within 2.5%)
    bulk_ms: float  # the greatest latency below the empty stretch (its bin's upper edge)
    typical_ms: float  # the median answer's latency (in the bulk)

    @property
    def pause_ms(self) -> float:
        """The pause the group was held through: a request in flight when it began had been
        sent anywhere up to one request's time before, so held about half of that beyond it."""
        return self.median_ms - self.typical_ms / 2


def cluster_of(spread: Spread, least_ms: float) -> Cluster | None:
    """The group of answers far above the rest (see the module's docstring); None: none."""
    pairs = sorted(spread)
    total = sum(n for _, n in pairs)
    below = 0
    for i, (top, n) in enumerate(pairs[:-1]):
        below += n
        low = pairs[i + 1][0] / COARSE_STEP
        if below * 2 > total and low >= max(least_ms, T.pause_cluster_gap * top):
            above = pairs[i + 1 :]
            return Cluster(total - below, math.floor(low), _median(above), top, _median(pairs))
    return None


def held(spread: Spread, at_least_ms: float) -> int:
    """The answers whose latency was `at_least_ms` or more (their whole bin above it)."""
    return sum(n for edge, n in spread if edge / COARSE_STEP >= at_least_ms)


def _median(pairs: Spread) -> float:
    """The middle (geometric) of the bin that holds the median answer."""
    half = sum(n for _, n in pairs) / 2
    cumulative = itertools.accumulate(n for _, n in pairs)
    at = next(i for i, seen in enumerate(cumulative) if seen >= half)
    return round(pairs[at][0] / math.sqrt(COARSE_STEP), 1)
