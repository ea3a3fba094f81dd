"""A run's points, built once: every figure a point prints, each with the sample it rests on.

A point is one model at one mode and level, its trials combined. Its trials are the steps that
measured something: a step the lab skipped (a failed preflight, a server that died) is kept beside
them for its flags, the reason the point is excluded, and never averaged in as a zero (a 2-trial
point of 96.6 rps printed 64.4 once a skipped third trial joined it). Its throughput and p99 are
the `Side`s the one test of difference (`lab.verdict.difference`) compares, built here and nowhere
else in the analysis: the point table prints their values, the judge ranks and ties them, the
crossovers, the ranking behind a front, the lead's p99 extremes, the answer and `lab compare` all
test them. Each used to rebuild its sides from the step records on its own, so a figure printed
in one place and the figure tested in another could part ways; now they are one object.

`lab advise` still judges a single open-loop step against a target (`lab.advise.target`): that
is one step, not a point of a sweep, read before any run directory is analysed.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from lab.record.flags import excluding
from lab.record.step import StepRecord
from lab.record.thresholds import T
from lab.verdict.difference import METRICS, PointKey, Side, beyond, point_key, points, side

UNSTABLE_SPREAD = T.trials_unstable_spread_share  # (max - min) / median of trials: `unstable`


@dataclass(frozen=True)
class Estimate:
    """A point estimate from repeated samples (the median: robust to one bad trial) and their
    relative spread; its interval is the one test of difference's (`lab.verdict.difference`)."""

    n: int
    median: float
    spread: float  # (max - min) / median; 0 for one sample

    @property
    def unstable(self) -> bool:
        return self.n >= 2 and self.spread >= UNSTABLE_SPREAD


def estimate(values: Sequence[float]) -> Estimate:
    xs = sorted(float(v) for v in values if not math.isnan(float(v)))
    if not xs:
        return Estimate(0, math.nan, math.nan)
    median = statistics.median(xs)
    return Estimate(len(xs), median, (xs[-1] - xs[0]) / median if median else 0.0)


@dataclass(frozen=True)
class Point:
    """One model at one level, its trials combined: its throughput and p99 as the one test of
    difference compares them, and what keeps it from being compared."""

    model: str
    mode: str
    level: float  # users (closed loop) or arrival rate (open loop)
    records: tuple[StepRecord, ...]  # its trials, in trial order: the sample its sides rest on
    throughput: Side
    latency: Side  # the p99
    flags: tuple[str, ...]
    excluded_by: tuple[str, ...]
    unexplained: str = ""  # why a trial stayed below the ideal with no cause found ("" if none)
    p99_beyond: float = math.inf  # requests beyond p99 in its thinnest trial
    skipped: tuple[StepRecord, ...] = ()  # its steps that measured nothing: why, in their flags

    @property
    def trials(self) -> int:
        return len(self.records)

    @property
    def label(self) -> str:
        """'200 users' or '300 req/s'."""
        return (self.records or self.skipped)[0].key.label

    @property
    def rps(self) -> float:
        return self.throughput.value

    @property
    def p99_ms(self) -> float:
        return self.latency.value

    def sides(self, more: Sequence[str] = ()) -> dict[str, Side]:
        """Its throughput and p99 sides, with `more` flags beside its steps' (a run's preflight,
        as `lab compare` reads them): the same `side` over the same records, `more` added."""
        if not more:
            return {"rps": self.throughput, "p99": self.latency}
        why = (*more, *(f for r in self.skipped for f in r.evidence.flags))
        return {metric: side(self.records, metric, why) for metric in METRICS}


Points = Mapping[PointKey, Point]  # (model, mode, level rounded) -> its point


def build(records: Sequence[StepRecord]) -> dict[PointKey, Point]:
    """Every point of `records`, in a fixed order whatever the records' (the one place the
    analysis makes a point's sides from its steps); a point every step of which was skipped is
    there too, with no trial, excluded by its steps' flags."""
    trials = points(records)
    skipped: dict[PointKey, list[StepRecord]] = {}
    for r in records:
        if not r.is_trial:
            skipped.setdefault(point_key(r), []).append(r)
    keys = sorted({*trials, *skipped})
    return {k: point(trials.get(k, []), skipped.get(k, [])) for k in keys}


def point(records: Sequence[StepRecord], skipped: Sequence[StepRecord] = ()) -> Point:
    """One point from its trials (one model, mode and level; in trial order) and the steps of it
    that were skipped (`StepRecord.is_trial`): their flags join the point's, nothing else."""
    trials = [r for r in records if r.is_trial]
    skipped = [*skipped, *(r for r in records if not r.is_trial)]
    every = [*trials, *skipped]
    # the sides' flags beside their trials'
    why = tuple(f for r in skipped for f in r.evidence.flags)
    flags = tuple(dict.fromkeys(f for r in every for f in r.evidence.flags))
    if estimate([r.load.throughput_rps for r in trials]).unstable:
        flags += ("unstable",)
    first = every[0]
    return Point(
        model=first.model,
        mode=first.mode,
        level=first.key.level,
        records=tuple(trials),
        throughput=side(trials, "rps", why),
        latency=side(trials, "p99", why),
        flags=flags,
        excluded_by=tuple(excluding(flags)),
        unexplained=next(
            (r.evidence.limit_reason for r in trials if r.evidence.limited_by == "unknown"), ""
        ),
        p99_beyond=min((beyond(r.load.ok) for r in trials), default=0.0),
        skipped=tuple(skipped),
    )


def only(data: Points, models: set[str]) -> Points:
    """The points of `models` alone."""
    return {k: p for k, p in data.items() if p.model in models}
