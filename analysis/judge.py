"""The ranking at each level: which model is best, which are tied, which are excluded and why.

("Verdict" is kept for one thing: a step's limit, from the rule table of `lab.verdict`; this module
ranks the models at a level, from their points.)

A pure function of the run's points (`analysis.points`: built once from the step records, each
with the trials its figures rest on; no files, no clock), so every rule is unit-tested on
hand-built records. It makes no figure of its own: it ranks and ties the very `Side`s the point
table prints. Rules:

- A model's steps at a level are excluded when any carries a flag the registry marks as
  excluding (serialized, a fault, nothing measured, or `lab_limited`: the verdict's rule table
  named the lab's own apparatus or the machine as the limit): an excluded model is never
  "best", and a level the lab limited says so.
- Throughput and p99 are the means of the trials (the figures printed). A rival ties the best
  when the one test of difference (`lab.verdict.difference`: the interval of their difference,
  from the trials, or for one trial from the run-to-run floor the lab measured by A/A runs;
  never finer than the instrument on p99) does not call them apart. A p99 with fewer than ten
  requests beyond it in a trial, or whose tail may be the generator's own (`generator_lag`), is
  compared with nothing: no best p99 rests on it.
- Flags that do not exclude but qualify (client saturated, host busy) become notes; a step whose
  tail may be the generator's own (`generator_lag`) is never the basis of the p99 ranking.
- A best model below the ideal with no cause found (`limited_by` "unknown") is crowned only with
  that said beside it: its throughput is not shown to be the model's own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from analysis.points import Point, Points
from lab.record.flags import FLAGS
from lab.record.step import level_label
from lab.verdict.difference import MIN_BEYOND, TOO_FEW, differ


@dataclass(frozen=True)
class LevelRanking:
    mode: str
    level: float  # users (closed loop) or arrival rate (open loop)
    best_rps: tuple[str, ...]  # the best first, then the models tied with it
    best_p99: tuple[str, ...]
    excluded: dict[str, tuple[str, ...]]  # model -> the flags that exclude it
    notes: tuple[str, ...]
    trials: int  # the fewest trials among the points
    p99_unread: float = math.nan  # no best p99: the most requests beyond p99 any fair model had

    @property
    def label(self) -> str:
        return level_label(self.level, None if self.mode == "closed" else self.level)


def judge(pts: Points) -> list[LevelRanking]:
    """One ranking per mode and level, in order, from the run's points (`analysis.points.build`,
    once per run): each point's trials in trial order, so no flag list or "best only as
    measured" reason depends on the order records were read."""
    groups: dict[tuple[str, float], list[Point]] = {}
    for p in pts.values():
        groups.setdefault((p.mode, p.level), []).append(p)
    return [
        _ranking(mode, level, sorted(ps, key=lambda p: p.model))
        for (mode, level), ps in sorted(groups.items())
    ]


def _ranking(mode: str, level: float, at: list[Point]) -> LevelRanking:
    fair = [c for c in at if not c.excluded_by]
    notes = tuple(
        FLAGS[f].meaning
        for f in dict.fromkeys(f for c in fair for f in c.flags)
        if f in FLAGS and f != "errors"
    )
    best_rps = _winners(fair, higher=True)
    notes += _labs_own(at)
    notes += tuple(
        f"{c.model} is best only as measured: {c.unexplained}"
        for c in fair
        if c.model in best_rps and c.unexplained
    )
    return LevelRanking(
        mode=mode,
        level=level,
        best_rps=best_rps,
        best_p99=_winners(fair, higher=False),
        excluded={c.model: c.excluded_by for c in at if c.excluded_by},
        notes=notes,
        trials=min((c.trials for c in at if c.trials), default=0),  # a skipped point has none
        p99_unread=_unread(fair),
    )


def _labs_own(at: list[Point]) -> tuple[str, ...]:
    """Where the verdict's rules named the lab's own limit, the comparison is the lab's."""
    labs = [c.model for c in at if "lab_limited" in c.excluded_by]
    if not labs:
        return ()
    every = "every model" if len(labs) == len(at) else ", ".join(labs)
    return (
        f"the lab's own limit at this level for {every} (its apparatus or the machine set the "
        "figures, not the model): not compared",
    )


def _winners(fair: list[Point], higher: bool) -> tuple[str, ...]:
    """The best model on throughput (higher) or p99 (lower), then those the one test of
    difference does not set apart from it."""
    if higher:
        ranked = sorted((c for c in fair if c.rps > 0), key=lambda c: (-c.rps, c.model))
    else:
        ranked = sorted(_p99_known(fair), key=lambda c: (c.p99_ms, c.model))
    if not ranked:
        return ()
    best = ranked[0]
    tied = [c.model for c in ranked[1:] if not _apart(best, c, higher)]
    return (best.model, *sorted(tied))


def _apart(best: Point, rival: Point, higher: bool) -> bool:
    if higher:
        return differ(rival.throughput, best.throughput).apart
    return differ(best.latency, rival.latency).apart


def _p99_known(fair: list[Point]) -> list[Point]:
    """The points whose p99 can be compared: measured, the server's own tail, and with
    enough requests beyond it (docs/trust.md)."""
    return [c for c in fair if not c.latency.unfit and not math.isnan(c.p99_ms)]


def _unread(fair: list[Point]) -> float:
    """Where no fair p99 can be compared for too few requests beyond it: the most there were."""
    thin = [c for c in fair if c.latency.unfit == (TOO_FEW,)]
    if not thin or _p99_known(fair):
        return math.nan
    return max(c.p99_beyond for c in thin)


def sentence(v: LevelRanking) -> str:
    """The ranking at one level in plain words, for the terminal and the report."""
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
            "(docs/statistics.md); --trials 3 measures the spread instead"
        )
    parts += v.notes
    return "; ".join(parts)


def _names(models: tuple[str, ...]) -> str:
    if not models:
        return "none (no fair result)"
    return models[0] + (f" (tied: {', '.join(models[1:])})" if len(models) > 1 else "")
