"""Compare two runs point by point: the change in throughput and p99, and whether it is real.

Significance is Welch's 95% interval of the difference excluding zero. The samples are the
trials when both runs have at least two per point; with single-trial runs (`quick`) they are the
per-second values of the step, which are somewhat autocorrelated, so "significant" there is a
hint rather than proof; the `basis` column says which was used. The p99 shown is always the
merged-histogram p99 of each run; the per-trial or per-second p99s only feed the test.
"""

from __future__ import annotations

import math

import pandas as pd
from rich.console import Console
from rich.table import Table

from analysis.load import POINT, Run
from analysis.metrics import point_table
from analysis.stats import welch


def _samples(run: Run, key: tuple, metric: str) -> tuple[list[float], str]:
    steps = run.steps
    sel = steps[(steps["model"] == key[0]) & (steps["mode"] == key[1])]
    sel = sel[sel["concurrency"] == key[2]]
    column = "throughput_rps" if metric == "rps" else "p99_ms"
    if len(sel) >= 2:
        return sel[column].astype(float).tolist(), "trials"
    ts = run.timeseries
    if ts.empty:
        return [], "none"
    sec = ts[(ts["model"] == key[0]) & (ts["mode"] == key[1]) & (ts["concurrency"] == key[2])]
    return sec[metric].dropna().astype(float).tolist(), "seconds"


def compare(a: Run, b: Run) -> pd.DataFrame:
    """One row per point present in both runs: values, relative change, its interval, verdict."""
    ta, tb = point_table(a), point_table(b)
    if ta.empty or tb.empty:
        return pd.DataFrame()
    both = ta.merge(tb, on=POINT, suffixes=("_a", "_b"))
    rows = []
    for rec in both.to_dict("records"):
        key = (rec["model"], rec["mode"], rec["concurrency"])
        row = {k: rec[k] for k in POINT}
        for metric, value in (("rps", "rps"), ("p99", "p99_ms")):
            sa, basis_a = _samples(a, key, value)
            sb, basis_b = _samples(b, key, value)
            change = welch(sa, sb)
            base = rec[f"{value}_a"]
            row[f"{metric}_a"] = base
            row[f"{metric}_b"] = rec[f"{value}_b"]
            row[f"{metric}_change"] = (rec[f"{value}_b"] - base) / base if base else math.nan
            row[f"{metric}_ci_lo"] = change.lo / change.mean_a if change.mean_a else math.nan
            row[f"{metric}_ci_hi"] = change.hi / change.mean_a if change.mean_a else math.nan
            row[f"{metric}_significant"] = change.significant
            row["basis"] = basis_a if basis_a == basis_b else f"{basis_a}/{basis_b}"
        row["flags"] = ", ".join(sorted(set(rec["flags_a"]) | set(rec["flags_b"])))
        rows.append(row)
    return pd.DataFrame(rows)


def _pct(x: float) -> str:
    return "-" if math.isnan(x) else f"{x:+.1%}"


def print_compare(frame: pd.DataFrame, title: str, console: Console | None = None) -> None:
    console = console or Console()
    if frame.empty:
        console.print("no point was measured in both runs")
        return
    out = Table(title=title, header_style="bold")
    for header in (
        "model",
        "c",
        "rps A",
        "rps B",
        "change",
        "95% CI",
        "",
        "p99 A",
        "p99 B",
        "change",
        "95% CI",
        "",
        "basis",
        "flags",
    ):
        out.add_column(header, justify="left" if header in ("model", "basis", "flags") else "right")
    for r in frame.to_dict("records"):
        cells = [r["model"], str(r["concurrency"])]
        for metric, spec in (("rps", "{:.1f}"), ("p99", "{:.1f}")):
            sig = r[f"{metric}_significant"]
            cells += [
                spec.format(r[f"{metric}_a"]),
                spec.format(r[f"{metric}_b"]),
                _pct(r[f"{metric}_change"]),
                f"{_pct(r[f'{metric}_ci_lo'])}..{_pct(r[f'{metric}_ci_hi'])}",
                "[bold]significant[/]" if sig else "[dim]n.s.[/]",
            ]
        out.add_row(*cells, r["basis"], r["flags"])
    console.print(out)
    n = len(frame)
    rps_sig = int(frame["rps_significant"].sum())
    p99_sig = int(frame["p99_significant"].sum())
    console.print(
        f"{rps_sig} of {n} points changed significantly in throughput, {p99_sig} of {n} in p99 "
        "(95% Welch interval of the difference excludes zero)."
    )
