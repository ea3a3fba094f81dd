"""Compare two runs point by point: the change in throughput and p99, and whether it is real.

Every change is judged by the one test of difference (`lab.verdict.difference`), the same that names
the best model and the ties, on the same sides (each run's points, `Run.points`, built once; a run's
preflight flags beside its steps'): with at least two trials per point in both runs, Welch's
interval over the trials; with single trials (`quick`), each point's own interval (its seconds and
the run-to-run floor the lab measured by A/A runs) in quadrature. A point that is not a fair result
in either run is compared with nothing, and neither is a p99 whose tail is not the server's (a flag
that excludes the tail) or with fewer than ten requests beyond it; a p99 change is never finer than
the instrument's 15% / 3 ms. The values shown are the ones compared (the means of the trials), so a
printed change always lies inside its own interval, and a relative interval never falls below -100%.
A run compares many points, so the changes of one metric are one family, corrected for their number
by Benjamini-Hochberg (`lab.verdict.difference.corrected`): between two runs of the same code a star
appears anywhere with at most a 5% chance, and among the starred changes of a real one at most about
5% are expected false; the words say how many were tested.

Two runs that differ in scenario (delay, route or mix, app, front, models, levels, machine) say
so first, and the points measured in only one of them are listed: a change between them is the
scenario's, not the code's. The exit code says what was found (docs/failures-and-stops.md): 0
nothing changed, 6 a point changed, 7 the runs differ in scenario.

What limits each point (`limited_by`) is shown for both runs: a change in throughput that comes
with a change of limit (`none -> server_cpu`) says why it changed, not only that it did.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pandas as pd
from rich import box
from rich.console import Console
from rich.table import Table

from analysis.loading import POINT, Run
from analysis.metrics import point_table
from analysis.summary import wide_console
from lab.record.errors import EXIT_CHANGED, EXIT_OTHER_SCENARIO
from lab.verdict.difference import (
    BUDGET_MS,
    BUDGET_SHARE,
    CHANGED,
    CORRECTION,
    FLAGGED,
    METRICS,
    MIN_BEYOND,
    TOO_FEW,
    Floor,
    corrected,
    differ,
    floor,
)

Manifest = dict[str, Any]
SCENARIO: tuple[tuple[str, Callable[[Manifest], object]], ...] = (  # what a run measured
    ("upstream delay", lambda m: _scenario(m, "delay_ms", "distribution", "upstream")),
    ("route or mix", lambda m: _scenario(m, "route", "path")),
    ("app", lambda m: _scenario(m, "app")),
    ("mode and levels", lambda m: _scenario(m, "mode", "levels", "rates")),
    ("models", lambda m: sorted(m.get("models") or {})),
    ("front", lambda m: {k: v.get("front") for k, v in (m.get("models") or {}).items()}),
    ("machine", lambda m: _machine(m)),
)


def _scenario(m: Manifest, *keys: str) -> object:
    scenario = m.get("scenario") or {}
    return {k: scenario.get(k) for k in keys if scenario.get(k) is not None}


def _machine(m: Manifest) -> object:
    env = m.get("environment") or {}
    return {k: env.get(k) for k in ("cpus", "cpu_model", "memory_gb") if env.get(k) is not None}


def scenario_differences(a: Run, b: Run) -> list[str]:
    """What the two runs measured differently, one line each ([] when the same scenario)."""
    out = []
    for what, read in SCENARIO:
        x, y = _flat(read(a.manifest)), _flat(read(b.manifest))
        if x != y:
            keys = [k for k in dict.fromkeys([*x, *y]) if x.get(k) != y.get(k)]
            said = "; ".join(
                f"{k} {_brief(x.get(k))} in A, {_brief(y.get(k))} in B".lstrip() for k in keys
            )
            out.append(f"{what}: {said}")
    return out


def _flat(value: object, prefix: str = "") -> dict[str, object]:
    """A manifest's value as dotted keys ("upstream.delay_ms"), so only what differs is said."""
    if not isinstance(value, dict):
        return {prefix: value}
    out: dict[str, object] = {}
    for k, v in value.items():
        out |= _flat(v, f"{prefix}.{k}" if prefix else str(k))
    return out


def _brief(value: object) -> str:
    text = "-" if value is None else str(value)
    return text if len(text) <= 80 else text[:77] + "..."


def unpaired(a: Run, b: Run) -> list[str]:
    """The points measured in one run only, e.g. "only in A: uvicorn at 200 users"."""
    out = []
    for name, mine, other in (("A", a.points, b.points), ("B", b.points, a.points)):
        alone = [f"{k[0]} at {v.label}" for k, v in mine.items() if k not in other]
        if alone:
            out.append(f"only in {name}: {', '.join(alone)}")
    return out


def compare(a: Run, b: Run, noise: Floor | None = None) -> pd.DataFrame:
    """One row per point present in both runs: the compared values, the relative change, its
    95% interval, its p-value and verdict (`significant`: changed once corrected (BH) for the
    number of points tested on that metric; `noise`: the run-to-run floor, the committed
    calibration unless given)."""
    noise = floor() if noise is None else noise
    ta, tb = point_table(a), point_table(b)
    if ta.empty or tb.empty:
        return pd.DataFrame()
    pa, pb = a.points, b.points
    rows = []
    for rec in ta.merge(tb, on=POINT, suffixes=("_a", "_b")).to_dict("records"):
        key = (str(rec["model"]), str(rec["mode"]), int(rec["concurrency"]))
        if key not in pa or key not in pb:
            continue
        sa, sb = pa[key].sides(rec["flags_a"]), pb[key].sides(rec["flags_b"])
        diffs = {m: differ(sa[m], sb[m], noise) for m in METRICS}
        row: dict[str, Any] = {k: rec[k] for k in POINT}
        for metric, d in diffs.items():
            change, lo, hi = d.relative()
            row |= {f"{metric}_a": d.a, f"{metric}_b": d.b, f"{metric}_change": change}
            row |= {f"{metric}_ci_lo": lo, f"{metric}_ci_hi": hi}
            row |= {f"{metric}_p": d.p, f"{metric}_basis": d.basis}
        row["limited_by_a"], row["limited_by_b"] = rec["limited_by_a"], rec["limited_by_b"]
        row["flags"] = ", ".join(sorted(set(rec["flags_a"]) | set(rec["flags_b"])))
        rows.append(row)
    frame = pd.DataFrame(rows)
    for metric in ("rps", "p99") if rows else ():  # one family per metric, corrected (BH)
        frame[f"{metric}_significant"] = corrected(frame[f"{metric}_p"].tolist())
    return frame


def exit_code(frame: pd.DataFrame, differences: list[str]) -> int:
    """7 when the runs differ in scenario, else 6 when a point changed, else 0."""
    if differences:
        return EXIT_OTHER_SCENARIO
    changed = not frame.empty and bool(frame[["rps_significant", "p99_significant"]].any().any())
    return EXIT_CHANGED if changed else 0


HEADERS = (
    "model",
    "c",
    "rps A",
    "rps B",
    "rps change [95% CI]",
    "p99 A",
    "p99 B",
    "p99 change [95% CI]",
    "basis",
    "limited by",
    "flags",
)


def _pct(x: float) -> str:
    return "-" if math.isnan(x) else f"{x:+.1%}"


def _num(x: float) -> str:
    return "-" if math.isnan(x) else f"{x:.1f}"


def _change(r: dict[str, Any], metric: str) -> str:
    """'+3.8% [-2.7%, +9.8%]', bold and starred when the change holds once corrected (BH) for
    the points tested; a p99 with too few requests beyond it is not compared."""
    if r[f"{metric}_basis"] in (TOO_FEW, FLAGGED):
        return f"{_pct(r[f'{metric}_change'])} [not compared]  "
    lo, hi = _pct(r[f"{metric}_ci_lo"]), _pct(r[f"{metric}_ci_hi"])
    text = f"{_pct(r[f'{metric}_change'])} [{lo}, {hi}]"
    return f"[bold]{text} *[/]" if r[f"{metric}_significant"] else f"{text}  "


def print_compare(
    frame: pd.DataFrame,
    title: str,
    console: Console | None = None,
    noise: Floor | None = None,
    first: tuple[list[str], list[str]] = ([], []),
) -> None:
    """The table and what it says; `first`: the runs' scenario differences and the points
    without a partner, said before anything else."""
    console = console or wide_console()
    noise = floor() if noise is None else noise
    differ, alone = first
    if differ:
        console.print("[bold red]the runs differ in scenario: changes below are the scenario's")
        for line in differ:
            console.print(f"  {line}", markup=False, highlight=False)
    for line in alone:
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    if frame.empty:  # nothing to show: the command says so, as an error (`lab compare`)
        return
    out = Table(title=title, header_style="bold", box=box.SIMPLE_HEAD, padding=(0, 1))
    for header in HEADERS:
        left = header in ("model", "basis", "limited by", "flags")
        out.add_column(header, justify="left" if left else "right", no_wrap=header != "flags")
    for r in frame.to_dict("records"):
        basis = {r["rps_basis"], r["p99_basis"]} - {"none", TOO_FEW}
        out.add_row(
            r["model"],
            str(r["concurrency"]),
            _num(r["rps_a"]),
            _num(r["rps_b"]),
            _change(r, "rps"),
            _num(r["p99_a"]),
            _num(r["p99_b"]),
            _change(r, "p99"),
            "/".join(sorted(basis)) or "-",
            _limits(r["limited_by_a"], r["limited_by_b"]),
            r["flags"],
        )
    console.print(out)
    n = len(frame)
    rps_sig = int(frame["rps_significant"].sum())
    p99_sig = int(frame["p99_significant"].sum())
    rps_n, p99_n = (int(frame[f"{m}_p"].notna().sum()) for m in ("rps", "p99"))
    moved = int((frame["limited_by_a"] != frame["limited_by_b"]).sum())
    few = int((frame["p99_basis"] == TOO_FEW).sum())
    unfair = int((frame["rps_basis"] == FLAGGED).sum())
    console.print(
        f"{rps_sig} of {rps_n} points tested {CHANGED} (*) in throughput, {p99_sig} of {p99_n} "
        f"in p99, {CORRECTION} for the number tested on each (the intervals shown are each "
        f"point's own 95%). {unfair} of {n} not compared "
        f"(not a fair result in a run), {few} of {n} p99s not compared "
        f"(fewer than {MIN_BEYOND} requests beyond p99); a p99 change within the instrument's "
        f"{BUDGET_SHARE:.0%} or {BUDGET_MS:g} ms is within noise; {noise.words()}. {moved} of "
        f"{n} changed what limits them (A → B).",
        highlight=False,
    )


def _limits(a: str, b: str) -> str:
    """'server_cpu' when both runs agree, 'none → server_cpu' when the limit moved."""
    a, b = a or "-", b or "-"
    return a if a == b else f"[bold]{a} → {b}[/]"
