"""What differs between the models of a run, said first and only where it is real.

On a small machine and an I/O-bound app every model often reaches the same throughput: the judge
ties them at every level, and seven per-level verdicts naming seven tied models say nothing one
line cannot. So the summary and the report say the tie once, then what does separate the models
at the highest tied level (the most load): the server CPU a request cost, the memory a connection
cost and p99, whose extremes are called apart only by the one test of difference
(`lab.verdict.difference`: enough requests beyond p99, the instrument's error, run-to-run
variance); and they point to `lab advise`, which answers a target load with the cheapest
configuration per model.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import pandas as pd

from analysis.judge import LevelVerdict
from lab.record.step import StepRecord
from lab.verdict.difference import APART, TOO_FEW, differ, points, side

ADVISE = (
    "for a target load, `lab advise --rps R --p99-ms L` finds each model's cheapest "
    "configuration (cores, memory) that meets it, confirmed by open-loop steps"
)
COSTS = (  # (column of the point table, what it is, unit, format)
    ("cpu_ms_per_req", "server CPU per request", "ms", "{:.2f}"),
    ("server_rss_kb_per_conn", "memory per connection", "KB", "{:,.0f}"),
)


def tied(table: pd.DataFrame, verdicts: Sequence[LevelVerdict]) -> list[LevelVerdict]:
    """The levels where every model measured, none excluded, ties the best on throughput."""
    if table.empty:
        return []
    out = []
    for v in verdicts:
        rows = table[(table["mode"] == v.mode) & (table["concurrency"] == round(v.level))]
        models = set(rows["model"])
        if len(models) >= 2 and not v.excluded and set(v.best_rps) == models:
            out.append(v)
    return out


def lead(
    table: pd.DataFrame,
    verdicts: Sequence[LevelVerdict],
    records: Sequence[StepRecord],
) -> list[str]:
    """The tie in one line, what separates the tied models, and the pointer to `lab advise`
    ([] when no level is a tie of every model)."""
    ties = tied(table, verdicts)
    if not ties:
        return []
    top = ties[-1]
    rows = table[(table["mode"] == top.mode) & (table["concurrency"] == round(top.level))]
    where = "every level" if len(ties) == len(verdicts) else _levels(ties)
    trials = "; one trial each" if min(v.trials for v in ties) == 1 else ""
    notes = sorted({n for v in ties for n in v.notes})
    first = f"all {len(rows)} models tie on throughput at {where}{trials}"
    separate = [_spread(rows, *cost) for cost in COSTS] + [_p99(rows, top, records)]
    return [
        "; ".join([first, *notes]),
        f"what separates them at {top.label}: " + "; ".join(s for s in separate if s),
        ADVISE,
    ]


def _levels(ties: Sequence[LevelVerdict]) -> str:
    """Closed loop: "1, 10 and 50 users"; otherwise each level's own label."""
    closed = all(v.mode == "closed" for v in ties)
    labels = [f"{v.level:g}" if closed else v.label for v in ties]
    said = labels[0] if len(labels) == 1 else f"{', '.join(labels[:-1])} and {labels[-1]}"
    return f"{said} user{'s' if ties[-1].level != 1 else ''}" if closed else said


def _spread(rows: pd.DataFrame, column: str, what: str, unit: str, spec: str) -> str:
    """`what` from its lowest to its highest model, e.g. "server CPU per request 0.30 ms
    (granian-asgi) to 0.55 ms (uwsgi-gevent)"."""
    if column not in rows:
        return ""
    known = rows[pd.to_numeric(rows[column], errors="coerce").notna()]
    if len(known) < 2:
        return ""
    low, high = known.loc[known[column].idxmin()], known.loc[known[column].idxmax()]
    lo, hi = spec.format(low[column]), spec.format(high[column])
    if lo == hi:  # one figure for all: "from 43 KB (a) to 43 KB (b)" says nothing
        return f"{what} {lo} {unit} in every model"
    return f"{what} {lo} {unit} ({low['model']}) to {hi} {unit} ({high['model']})"


def _p99(rows: pd.DataFrame, v: LevelVerdict, records: Sequence[StepRecord]) -> str:
    """p99 from its lowest to its highest model, and whether the one test of difference calls
    them apart (only points whose tail is the server's: none the generator's own lag may have
    moved)."""
    known = rows[rows["p99_ms"].map(lambda x: not math.isnan(x)) & rows["fair_p99"]]
    if len(known) < 2:
        return ""
    low, high = known.loc[known["p99_ms"].idxmin()], known.loc[known["p99_ms"].idxmax()]
    by_point = points(records)
    a, b = (by_point.get((str(r["model"]), v.mode, round(v.level)), []) for r in (low, high))
    d = differ(side(a, "p99"), side(b, "p99"))
    words = "apart beyond noise" if d.word == APART else "within noise"
    if d.basis == TOO_FEW:
        words = "too few requests beyond p99 to tell"
    return (
        f"p99 {low['p99_ms']:,.0f} ms ({low['model']}) to {high['p99_ms']:,.0f} ms "
        f"({high['model']}), {words}"
    )
