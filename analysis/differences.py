"""What differs between the models of a run, said first and only where it is real.

On a small machine and an I/O-bound app every model often reaches the same throughput: the judge
ties them at every level, and seven per-level rankings naming seven tied models say nothing one
line cannot. So the summary and the report say the tie once, then what does separate the models
at the highest tied level (the most load): the server CPU a request cost, the memory a connection
cost and p99, each from its lowest to its highest model (the p99s are the run's points' own sides,
`analysis.points`; the costs are sides of those points' trials) and called apart only by the one
test of difference (`lab.verdict.difference`: enough requests beyond p99, the instrument's error,
run-to-run variance; one trial of a cost, which has no run-to-run floor, is said to be a
description, not a claim); and they point to `lab advise`, which answers a target load with the
cheapest configuration per model.

Where one model overtakes another (`crossovers`) is a difference too: a flip in the order of two
models from one level to the next, read from the point table's figures (those the test compares)
and kept only where the test, corrected for every flip of the run, calls it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import pandas as pd

from analysis.judge import LevelRanking
from analysis.points import Point, Points
from lab.record.step import StepRecord
from lab.verdict.difference import (
    APART,
    CORRECTION,
    NONE,
    TOO_FEW,
    Side,
    corrected,
    differ,
    figure,
)

ADVISE = (
    "for a target load, `lab advise --rps R --p99-ms L` finds each model's cheapest configuration "
    "(cores, memory) that meets it, confirmed by open-loop steps"
)


def _cpu_ms(r: StepRecord) -> float | None:
    """One trial's server CPU per request, as the point table counts it."""
    return r.ms_per_request(r.resources.server_cpu_pct)


# (the figure of one trial, its name in the point table, what it is, unit, format)
Cost = tuple[Callable[[StepRecord], float | None], str, str, str, str]
COSTS: tuple[Cost, ...] = (
    (_cpu_ms, "cpu_ms_per_req", "server CPU per request", "ms", "{:.2f}"),
    (
        lambda r: r.resources.server_rss_kb_per_conn,
        "server_rss_kb_per_conn",
        "memory per connection",
        "KB",
        "{:,.0f}",
    ),
)


def tied(table: pd.DataFrame, rankings: Sequence[LevelRanking]) -> list[LevelRanking]:
    """The levels where every model measured, none excluded, ties the best on throughput."""
    if table.empty:
        return []
    out = []
    for v in rankings:
        rows = table[(table["mode"] == v.mode) & (table["concurrency"] == round(v.level))]
        models = set(rows["model"])
        if len(models) >= 2 and not v.excluded and set(v.best_rps) == models:
            out.append(v)
    return out


def lead(
    table: pd.DataFrame,
    rankings: Sequence[LevelRanking],
    pts: Points,
) -> list[str]:
    """The tie in one line, what separates the tied models, and the pointer to `lab advise`
    ([] when no level is a tie of every model)."""
    ties = tied(table, rankings)
    if not ties:
        return []
    top = ties[-1]
    rows = table[(table["mode"] == top.mode) & (table["concurrency"] == round(top.level))]
    where = "every level" if len(ties) == len(rankings) else _levels(ties)
    trials = "; one trial each" if min(v.trials for v in ties) == 1 else ""
    notes = sorted({n for v in ties for n in v.notes})
    first = f"all {len(rows)} models tie on throughput at {where}{trials}"
    separate = [_spread(rows, top, pts, cost) for cost in COSTS] + [_p99(rows, top, pts)]
    return [
        "; ".join([first, *notes]),
        f"what separates them at {top.label}: " + "; ".join(s for s in separate if s),
        ADVISE,
    ]


def _levels(ties: Sequence[LevelRanking]) -> str:
    """Closed loop: "1, 10 and 50 users"; otherwise each level's own label."""
    closed = all(v.mode == "closed" for v in ties)
    labels = [f"{v.level:g}" if closed else v.label for v in ties]
    said = labels[0] if len(labels) == 1 else f"{', '.join(labels[:-1])} and {labels[-1]}"
    return f"{said} user{'s' if ties[-1].level != 1 else ''}" if closed else said


def _spread(rows: pd.DataFrame, v: LevelRanking, pts: Points, cost: Cost) -> str:
    """`what` from its lowest to its highest model and what the one test of difference says of
    the two, e.g. "server CPU per request 0.30 ms (granian-asgi) to 0.55 ms (uwsgi-gevent),
    apart beyond noise". With one trial each there is no run-to-run floor for these figures:
    the words say the spread is a description, not a claim."""
    read, name, what, unit, spec = cost
    sides = {}
    for model in rows["model"]:
        point = pts.get((str(model), v.mode, round(v.level)))
        trials = point.records if point else ()
        s = figure(trials, name, [read(r) for r in trials])
        if not math.isnan(s.value):
            sides[str(model)] = s
    return _extremes(sides, what, unit, spec)


def _p99(rows: pd.DataFrame, v: LevelRanking, pts: Points) -> str:
    """p99 from its lowest to its highest model (the figures the test compares: only points
    whose tail is the server's, none the generator's own lag may have moved), and whether the
    one test of difference calls them apart."""
    sides = {}
    for model in rows.loc[rows["fair_p99"], "model"]:
        point = pts.get((str(model), v.mode, round(v.level)))
        if point and not math.isnan(point.p99_ms):
            sides[str(model)] = point.latency
    return _extremes(sides, "p99", "ms", "{:,.0f}")


def _extremes(sides: dict[str, Side], what: str, unit: str, spec: str) -> str:
    """The lowest and the highest of `sides` and the test's word on them ("" for fewer than
    two)."""
    if len(sides) < 2:
        return ""
    order = sorted(sides, key=lambda m: (sides[m].value, m))
    low, high = sides[order[0]], sides[order[-1]]
    d = differ(low, high)
    lo, hi = spec.format(low.value), spec.format(high.value)
    if d.basis == TOO_FEW:
        words = "too few requests beyond p99 to tell"
    elif d.basis == NONE:
        words = "one trial each and no run-to-run floor for it: a description, not a claim"
    else:
        words = "apart beyond noise" if d.word == APART else "within noise"
    return f"{what} {lo} {unit} ({order[0]}) to {hi} {unit} ({order[-1]}), {words}"


def crossovers(table: pd.DataFrame, by_point: Points) -> pd.DataFrame:
    """Where one model overtakes another: higher throughput, or lower p99, from a level on.

    Only fair points count (on p99, not one whose tail may be the generator's own either). A
    crossover is reported at the first level where the order of a pair flips relative to the
    level before (both models measured at both levels), the order read from the figures the
    test compares (the table's rps and p99_ms are those). `clear` says the one test of
    difference (`lab.verdict.difference`) calls the two apart at that level in the flip's own
    direction, once corrected (Benjamini-Hochberg) for every flip of the run that could be
    tested (`p`: the uncorrected p-value, nan where the points could not be compared).
    """
    cols = ["metric", "mode", "concurrency", "from_concurrency", "overtaker", "overtaken"]
    cols += ["p", "clear"]
    if table.empty:
        return pd.DataFrame(columns=cols)
    found = []
    for metric, sign in (("rps", 1.0), ("p99_ms", -1.0)):
        fair = table[table["fair" if metric == "rps" else "fair_p99"]]
        for mode, sub in fair.groupby("mode"):
            wide = sub.pivot_table(index="concurrency", columns="model", values=metric)
            models = sorted(wide.columns)
            for i, a in enumerate(models):
                for b in models[i + 1 :]:
                    for c, prev, win, lose in _flips(sign * (wide[a] - wide[b]), a, b):
                        lo, hi = (by_point.get((m, str(mode), int(c))) for m in (lose, win))
                        p = _p_toward(metric, lo, hi) if lo and hi else math.nan
                        found.append([metric, mode, int(c), int(prev), win, lose, p])
    out = pd.DataFrame(found, columns=cols[:-1])
    out["clear"] = corrected(out["p"].tolist()) if found else []
    return out


def crossing_words(cross: pd.DataFrame) -> str:
    """How many flips were tested and how many the corrected test kept: "1 of 57 flips tested
    beyond noise, Benjamini-Hochberg-corrected for their number (4 could not be tested)"."""
    tested = int(cross["p"].notna().sum()) if not cross.empty else 0
    clear = int(cross["clear"].sum()) if not cross.empty else 0
    untested = len(cross) - tested
    said = f"{clear} of {tested} flip(s) tested beyond noise, {CORRECTION} for their number"
    return said + (f" ({untested} could not be tested)" if untested else "")


def _flips(diff: pd.Series, a: str, b: str) -> list[tuple[Any, Any, str, str]]:
    """(level, the level before, overtaker, overtaken) where the sign of a - b flips."""
    out = []
    prev_c, prev_d = None, None
    for c, d in diff.dropna().items():
        if d == 0:
            continue
        if prev_d is not None and (d > 0) != (prev_d > 0):
            out.append((c, prev_c, *((a, b) if d > 0 else (b, a))))
        prev_c, prev_d = c, d
    return out


def _p_toward(metric: str, lose: Point, win: Point) -> float:
    """The p-value of the flip's difference where the test points the flip's way (the
    overtaker higher on throughput, lower on p99); 1 where it points the other way, so a
    crossover is never called clear against its own direction; nan where not compared."""
    name = "rps" if metric == "rps" else "p99"
    d = differ(lose.sides()[name], win.sides()[name])
    toward = d.diff > 0 if name == "rps" else d.diff < 0
    return d.p if toward or not d.compared else 1.0
