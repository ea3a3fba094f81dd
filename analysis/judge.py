"""The verdict: which model is best at each level, which are tied, which are excluded and why.

A pure function of step records (no files, no clock), so every rule is unit-tested on hand-built
records. Rules:

- A model's steps at a level are excluded when any carries a flag the registry marks as
  excluding (serialized, a fault, nothing measured, or `lab_limited`: the verdict's rule table
  named the lab's own apparatus or the machine as the limit): an excluded model is never
  "best", and a level the lab limited says so.
- Throughput and p99 are the medians of the trials; their 95% intervals come from the trials
  (Student's t, n >= 2: the trials carry run-to-run variance) or, for a single trial, from the
  run-to-run floor the lab measured by A/A runs (`analysis.noise`), around that trial's
  per-second throughput interval.
- A rival ties the best when their intervals overlap (without intervals: within 2%); on p99 when
  the interval of their difference (its half-width: the two halves in quadrature) or the
  instrument's error (15% or 3 ms) covers it. A p99 with fewer than ten
  requests beyond it in a trial is compared with nothing: no best p99 rests on it.
- Flags that do not exclude but qualify (client saturated, host busy) become notes; a step whose
  tail may be the generator's own (`generator_lag`) is never the basis of the p99 verdict.
- A best model below the ideal with no cause found (`limited_by` "unknown") is crowned only with
  that said beside it: its throughput is not shown to be the model's own.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from analysis.noise import MIN_BEYOND, beyond, budget_ms, floor
from analysis.stats import UNSTABLE_SPREAD, t975
from lab.record.flags import FLAGS, excluding, tail_excluding
from lab.record.step import StepRecord, level_label

TIE = 0.02  # throughput: within 2% with no interval to tell them apart is a tie


@dataclass(frozen=True)
class Contender:
    """One model at one level, its trials combined."""

    model: str
    trials: int
    rps: float
    rps_lo: float  # 95% interval (nan when there is none)
    rps_hi: float
    p99_ms: float
    flags: tuple[str, ...]
    excluded_by: tuple[str, ...]
    p99_excluded_by: tuple[str, ...] = ()  # flags that keep its p99 out of the p99 verdict
    unexplained: str = ""  # why a trial stayed below the ideal with no cause found ("" if none)
    p99_lo: float = math.nan  # 95% interval of the p99 (nan when there is none)
    p99_hi: float = math.nan
    p99_beyond: float = math.inf  # requests beyond p99 in its thinnest trial


@dataclass(frozen=True)
class LevelVerdict:
    mode: str
    level: float  # users (closed loop) or arrival rate (open loop)
    best_rps: tuple[str, ...]  # the best first, then the models tied with it
    best_p99: tuple[str, ...]
    excluded: dict[str, tuple[str, ...]]  # model -> the flags that exclude it
    notes: tuple[str, ...]
    trials: int  # the fewest trials among the contenders
    p99_unread: float = math.nan  # no best p99: the most requests beyond p99 any fair model had

    @property
    def label(self) -> str:
        return level_label(self.level, None if self.mode == "closed" else self.level)


def judge(records: Sequence[StepRecord]) -> list[LevelVerdict]:
    """One verdict per mode and level, in order."""
    groups: dict[tuple[str, float], dict[str, list[StepRecord]]] = {}
    for r in records:
        groups.setdefault((r.mode, r.key.level), {}).setdefault(r.model, []).append(r)
    return [
        _verdict(mode, level, [contender(model, rs) for model, rs in sorted(by_model.items())])
        for (mode, level), by_model in sorted(groups.items())
    ]


def contender(model: str, records: Sequence[StepRecord]) -> Contender:
    rps = [r.throughput_rps for r in records]
    centre = statistics.median(rps)
    lo, hi = _interval(rps) if len(rps) > 1 else _seconds_interval(records[0], centre)
    p99 = [r.latency_ms.get("p99", math.nan) for r in records if r.ok]
    p99_centre = statistics.median(p99) if p99 else math.nan
    p99_lo, p99_hi = _p99_interval(p99, p99_centre)
    flags = tuple(dict.fromkeys(f for r in records for f in r.flags))
    if len(rps) > 1 and centre > 0 and (max(rps) - min(rps)) / centre >= UNSTABLE_SPREAD:
        flags += ("unstable",)
    return Contender(
        model=model,
        trials=len(records),
        rps=centre,
        rps_lo=lo,
        rps_hi=hi,
        p99_ms=p99_centre,
        flags=flags,
        excluded_by=tuple(excluding(flags)),
        p99_excluded_by=tuple(tail_excluding(flags)),
        unexplained=next((r.limit_reason for r in records if r.limited_by == "unknown"), ""),
        p99_lo=p99_lo,
        p99_hi=p99_hi,
        p99_beyond=min(beyond(r.ok) for r in records),
    )


def _verdict(mode: str, level: float, contenders: list[Contender]) -> LevelVerdict:
    fair = [c for c in contenders if not c.excluded_by]
    notes = tuple(
        FLAGS[f].meaning
        for f in dict.fromkeys(f for c in fair for f in c.flags)
        if f in FLAGS and f != "errors"
    )
    best_rps = _winners(fair, higher=True)
    notes += _labs_own(contenders)
    notes += tuple(
        f"{c.model} is best only as measured: {c.unexplained}"
        for c in fair
        if c.model in best_rps and c.unexplained
    )
    return LevelVerdict(
        mode=mode,
        level=level,
        best_rps=best_rps,
        best_p99=_winners(fair, higher=False),
        excluded={c.model: c.excluded_by for c in contenders if c.excluded_by},
        notes=notes,
        trials=min((c.trials for c in contenders), default=0),
        p99_unread=_unread(fair),
    )


def _labs_own(contenders: list[Contender]) -> tuple[str, ...]:
    """Where the verdict's rules named the lab's own limit, the comparison is the lab's."""
    labs = [c.model for c in contenders if "lab_limited" in c.excluded_by]
    if not labs:
        return ()
    every = "every model" if len(labs) == len(contenders) else ", ".join(labs)
    return (
        f"the lab's own limit at this level for {every} (its apparatus or the machine set the "
        "figures, not the model): not compared",
    )


def _winners(fair: list[Contender], higher: bool) -> tuple[str, ...]:
    """The best model on throughput (higher) or p99 (lower), then those tied with it."""
    if higher:
        ranked = sorted(fair, key=lambda c: -c.rps)
    else:
        ranked = sorted(_p99_known(fair), key=lambda c: c.p99_ms)
    if not ranked or (higher and ranked[0].rps <= 0):
        return ()
    best = ranked[0]
    tied = [c.model for c in ranked[1:] if _tied(best, c, higher)]
    return (best.model, *sorted(tied))


def _p99_known(fair: list[Contender]) -> list[Contender]:
    """The contenders whose p99 can be compared: measured, the server's own tail, and with
    enough requests beyond it (docs/trust.md)."""
    return [
        c
        for c in fair
        if not math.isnan(c.p99_ms) and not c.p99_excluded_by and c.p99_beyond >= MIN_BEYOND
    ]


def _unread(fair: list[Contender]) -> float:
    """Where no fair p99 can be compared for too few requests beyond it: the most there were."""
    measured = [c for c in fair if not math.isnan(c.p99_ms) and not c.p99_excluded_by]
    if not measured or _p99_known(fair):
        return math.nan
    return max(c.p99_beyond for c in measured)


def _tied(best: Contender, rival: Contender, higher: bool) -> bool:
    if not higher:
        halves = ((c.p99_hi - c.p99_lo) / 2 for c in (best, rival))
        half = math.hypot(*(0.0 if math.isnan(h) else h for h in halves))  # of the difference
        return rival.p99_ms - best.p99_ms <= max(half, budget_ms(best.p99_ms, rival.p99_ms))
    if not (math.isnan(rival.rps_hi) or math.isnan(best.rps_lo)):
        return rival.rps_hi >= best.rps_lo
    return abs(rival.rps - best.rps) <= TIE * abs(best.rps)


def _interval(xs: Sequence[float]) -> tuple[float, float]:
    """95% interval of the mean of `xs` (Student's t)."""
    n = len(xs)
    mean = sum(xs) / n
    half = t975(n - 1) * statistics.stdev(xs) / math.sqrt(n)
    return mean - half, mean + half


def _seconds_interval(record: StepRecord, centre: float) -> tuple[float, float]:
    """A single trial's interval: its per-second throughput's, widened by the run-to-run floor."""
    seconds = [float(x) for x in record.timeseries.get("rps", [])]
    if len(seconds) < 2:
        return math.nan, math.nan
    lo, hi = _interval(seconds)
    half = math.hypot((hi - lo) / 2, floor().point("rps", centre))
    return centre - half, centre + half


def _p99_interval(p99: list[float], centre: float) -> tuple[float, float]:
    """The trials' t interval, or for one trial the run-to-run floor around it (nan: none)."""
    if len(p99) > 1:
        return _interval(p99)
    half = floor().point("p99", centre) if p99 else 0.0
    return (centre - half, centre + half) if half else (math.nan, math.nan)


def sentence(v: LevelVerdict) -> str:
    """The verdict at one level in plain words, for the terminal and the report."""
    p99 = _names(v.best_p99)
    if not math.isnan(v.p99_unread):
        p99 = f"none (at most {v.p99_unread:.1f} requests beyond p99: {MIN_BEYOND} needed)"
    parts = [f"{v.label} ({v.mode}): best rps {_names(v.best_rps)}, best p99 {p99}"]
    if v.excluded:
        why = "; ".join(f"{m} ({', '.join(fs)})" for m, fs in sorted(v.excluded.items()))
        parts.append(f"excluded: {why}")
    if v.trials == 1:
        parts.append(
            "single trial: its intervals include the run-to-run floor of the lab's A/A runs "
            "(docs/trust.md); --trials 3 measures the spread instead"
        )
    parts += v.notes
    return "; ".join(parts)


def _names(models: tuple[str, ...]) -> str:
    if not models:
        return "none (no fair result)"
    return models[0] + (f" (tied: {', '.join(models[1:])})" if len(models) > 1 else "")
