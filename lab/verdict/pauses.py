"""Pauses: the server stopped answering for a fraction of a second or more, seen at 100 ms.

Why beside the whole-second outage (`lab.verdict.facts.outage_of`): a pause of 1.5 s in every
10 s leaves no second empty (380, 60, 140, 371 answers a second), so a rule over whole seconds
calls it noise while its p99 is 25 times the other model's. The answers' own arrival times, per
100 ms (`StepRecord.answers_100ms`, filled alike by the lab's generator and by oha), show it.

A pause is a run of 100 ms bins with at most `outage_second_share` of the median bin's answers
(the median of the bins with any: a pause longer than half the window would be its own median).
Its length is estimated from the run and the shortfall of the bins on either side (a pause that
starts half way through a bin leaves half its answers), so a pause is told from a single quiet
bin; it counts where it lasts at least `pause_delays` d or `pause_min_ms`, whichever is larger
(shorter ones are a request's own wait), where the median bin holds enough answers that the
quiet is not chance, where the longest request waited at least half the pause (the requests
held through it: the latency clusters far above the rest) and where the generator's own loop was
not late by half the pause in those seconds (then the generator paused, not the server).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from lab.record.step import StepRecord
from lab.record.thresholds import T

TICK_MS = 100.0  # `StepRecord.answers_100ms`'s bin


@dataclass(frozen=True)
class Pause:
    start_s: float  # from the window's opening
    length_ms: float  # estimated from the quiet bins and their neighbours' shortfall


def least_pause_ms(delay_ms: float) -> float:
    """The shortest quiet that counts as a pause for a step whose requests take `delay_ms`."""
    return max(T.pause_delays * delay_ms, T.pause_min_ms)


def pauses_of(r: StepRecord, delay_ms: float) -> tuple[Pause, ...]:
    """The step's pauses (see the module's docstring); () where the series is missing or too
    thin to tell a pause from chance."""
    ticks = list(r.answers_100ms)
    if not ticks or not (r.users or r.rate_rps):
        return ()
    least = least_pause_ms(delay_ms)
    median = statistics.median([n for n in ticks if n > 0] or [0])
    if median * (least / TICK_MS) < T.pause_min_expected_answers:
        return ()
    waited = max(r.latency_all_ms.get("max", 0.0), r.latency_ms.get("max", 0.0))
    lags = list(r.timeseries.get("lag_max_ms") or [])
    found = []
    for first, last in quiet_runs(ticks, T.outage_second_share * median):
        length = _length_ms(ticks, first, last, median)
        seconds = range(int(first * TICK_MS // 1000), int(last * TICK_MS // 1000) + 1)
        own = max((lags[s] for s in seconds if s < len(lags) and lags[s] == lags[s]), default=0.0)
        if length >= least and waited >= length / 2 and own < length / 2:
            found.append(Pause(round(first * TICK_MS / 1000, 1), round(length, -1)))
    return tuple(found)


def quiet_runs(ticks: Sequence[int], most: float) -> list[tuple[int, int]]:
    """(first, last) bin of each run of bins with at most `most` answers."""
    runs: list[tuple[int, int]] = []
    start = None
    for i, n in enumerate([*ticks, math.inf]):
        if n <= most and start is None:
            start = i
        elif n > most and start is not None:
            runs.append((start, i - 1))
            start = None
    return runs


def _length_ms(ticks: Sequence[int], first: int, last: int, median: float) -> float:
    """The quiet bins, plus the part of each neighbour its shortfall says was quiet too (a bin
    past the series' edge: none)."""
    edges = [ticks[i] for i in (first - 1, last + 1) if 0 <= i < len(ticks)]
    partial = sum(min(max(1 - n / median, 0.0), 1.0) for n in edges)
    return (last - first + 1 + partial) * TICK_MS


def period_s(found: Sequence[Pause]) -> float | None:
    """The median time between one pause's start and the next (None: fewer than two)."""
    starts = [p.start_s for p in found]
    gaps = [b - a for a, b in zip(starts, starts[1:], strict=False)]
    return round(statistics.median(gaps), 1) if gaps else None
