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
quiet is not chance, where requests were held through it (the answers that waited half its
length or more are `pause_held_share` of what it held: `lab.verdict.clusters.held`; an older
record without the answers by latency: its slowest request waited half of it) and where the
generator's own loop was not late by half the pause in those seconds (then the generator
paused, not the server). Where the bins are too thin (a few users), the requests held through
a pause tell it instead: a group of answers far above the rest (`lab.verdict.clusters`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from lab.record.step import StepRecord
from lab.record.thresholds import T
from lab.verdict.clusters import cluster_of, held

TICK_MS = 100.0  # `StepRecord.answers_100ms`'s bin


@dataclass(frozen=True)
class Pause:
    start_s: float | None  # from the window's opening (None: not told when)
    length_ms: float  # estimated from the quiet bins and their neighbours' shortfall
    seen: str = "bins"  # "bins": per 100 ms; "held": from the requests held through it


def least_pause_ms(delay_ms: float) -> float:
    """The shortest quiet that counts as a pause for a step whose requests take `delay_ms`."""
    return max(T.pause_delays * delay_ms, T.pause_min_ms)


def pauses_of(r: StepRecord, delay_ms: float) -> tuple[Pause, ...]:
    """The step's pauses (see the module's docstring): from the bins where they hold enough
    answers, else from the requests held through them; () where neither tells one."""
    if not (r.users or r.rate_rps):
        return ()
    ticks = list(r.load.answers_100ms)
    least = least_pause_ms(delay_ms)
    median = statistics.median([n for n in ticks if n > 0] or [0])
    if median * (least / TICK_MS) < T.pause_min_expected_answers:
        return held_pauses(r, least)
    lags = list(r.timeseries.get("lag_max_ms") or [])
    found = []
    for first, last in quiet_runs(ticks, T.outage_second_share * median):
        length = _length_ms(ticks, first, last, median)
        seconds = range(int(first * TICK_MS // 1000), int(last * TICK_MS // 1000) + 1)
        own = _own_lag(r, lags, seconds)
        if length >= least and _held_through(r, length) and own < length / 2:
            found.append(Pause(round(first * TICK_MS / 1000, 1), round(length, -1)))
    return tuple(found)


def held_pauses(r: StepRecord, least_ms: float) -> tuple[Pause, ...]:
    """Pauses told by the requests held through them (`lab.verdict.clusters`): their latency
    the length, their number per user (closed loop) or the runs of seconds they answered in the
    count, those seconds the starts where they tell each pause apart. One slow answer among
    several users is its own request's wait: a pause holds every user's."""
    c = cluster_of(r.load.answers_by_latency, least_ms)
    closed = r.users if r.users and not r.rate_rps else 0
    if c is None or (closed >= 2 and c.count < 2):
        return ()
    maxes = list(r.timeseries.get("max_ms") or [])
    ends = [i for i, m in enumerate(maxes) if m >= c.least_ms]
    runs = [i for i in ends if i - 1 not in ends]
    if _own_lag(r, list(r.timeseries.get("lag_max_ms") or []), ends) >= c.least_ms / 2:
        return ()
    n = max(len(runs), round(c.count / closed) if closed else 1, 1)
    length = round(c.pause_ms, -1)
    starts = [round(max(i + 0.5 - length / 1000, 0.0), 1) for i in runs]
    return tuple(Pause(s, length, "held") for s in (starts if len(runs) == n else [None] * n))


def _own_lag(r: StepRecord, lags: Sequence[float], seconds: Sequence[int]) -> float:
    """The generator's own loop lag at its worst in those seconds (the step's, unknown)."""
    known = [lags[s] for s in seconds if s < len(lags) and lags[s] == lags[s]]
    return max(known) if known else r.evidence.generator_lag_ms.get("max", 0.0)


def _held_through(r: StepRecord, length_ms: float) -> bool:
    """Requests waited through a pause this long: half of what it held waited half of it or
    more (closed loop: a request a user; open: its first half's arrivals, up to the cap)."""
    if not r.load.answers_by_latency:  # an older record: its slowest request
        waited = max(r.latency.latency_all_ms.get("max", 0.0), r.latency.latency_ms.get("max", 0.0))
        return waited >= length_ms / 2
    if r.rate_rps:
        holds = min(r.rate_rps * length_ms / 2000, r.max_outstanding or math.inf)
    else:
        holds = float(r.users or 1)
    return held(r.load.answers_by_latency, length_ms / 2) >= max(T.pause_held_share * holds, 1)


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
    starts = [p.start_s for p in found if p.start_s is not None]
    gaps = [b - a for a, b in zip(starts, starts[1:], strict=False)]
    return round(statistics.median(gaps), 1) if gaps else None
