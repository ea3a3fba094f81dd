"""Compare two runs point by point: the change in throughput and p99, and whether it is real.

A change is significant when its 95% interval excludes zero. With at least two trials per point
in both runs the interval is Welch's over the trials (throughput and per-trial p99). With single
trials (`quick`) throughput uses the step's per-second values and p99 a bootstrap over the
requests in the histograms; both treat correlated samples as independent, so "significant" there
is a strong hint rather than proof. The basis columns say which was used. The values shown are
always each run's point values (median throughput, merged-histogram p99).
"""

from __future__ import annotations

import math

import pandas as pd
from rich import box
from rich.console import Console
from rich.table import Table

from analysis.load import POINT, Run
from analysis.metrics import point_table
from analysis.stats import Change, bootstrap_percentile, welch
from analysis.summary import wide_console


def _trials(run: Run, key: tuple, column: str) -> list[float]:
    steps = run.steps
    sel = steps[(steps["model"] == key[0]) & (steps["mode"] == key[1])]
    return sel.loc[sel["concurrency"] == key[2], column].astype(float).tolist()


def _seconds(run: Run, key: tuple) -> list[float]:
    ts = run.timeseries
    if ts.empty:
        return []
    sel = ts[(ts["model"] == key[0]) & (ts["mode"] == key[1]) & (ts["concurrency"] == key[2])]
    return sel["rps"].dropna().astype(float).tolist()


def _throughput_change(a: Run, b: Run, key: tuple) -> tuple[Change, str]:
    ta, tb = _trials(a, key, "throughput_rps"), _trials(b, key, "throughput_rps")
    if len(ta) >= 2 and len(tb) >= 2:
        return welch(ta, tb), "trials"
    return welch(_seconds(a, key), _seconds(b, key)), "seconds"


def _p99_change(a: Run, b: Run, key: tuple) -> tuple[Change, str]:
    ta, tb = _trials(a, key, "p99_ms"), _trials(b, key, "p99_ms")
    if len(ta) >= 2 and len(tb) >= 2:
        return welch(ta, tb), "trials"
    ha, hb = a.histograms.get(key), b.histograms.get(key)
    if ha is None or hb is None:
        return welch([], []), "none"
    return bootstrap_percentile(ha, hb, 99.0), "requests"


def compare(a: Run, b: Run) -> pd.DataFrame:
    """One row per point present in both runs: values, relative change, its interval, verdict."""
    ta, tb = point_table(a), point_table(b)
    if ta.empty or tb.empty:
        return pd.DataFrame()
    both = ta.merge(tb, on=POINT, suffixes=("_a", "_b"))
    rows = []
    for rec in both.to_dict("records"):
        key = (rec["model"], rec["mode"], int(rec["concurrency"]))
        row = {k: rec[k] for k in POINT}
        for metric, column, test in (
            ("rps", "rps", _throughput_change),
            ("p99", "p99_ms", _p99_change),
        ):
            change, basis = test(a, b, key)
            base = rec[f"{column}_a"]
            row[f"{metric}_a"] = base
            row[f"{metric}_b"] = rec[f"{column}_b"]
            row[f"{metric}_change"] = (rec[f"{column}_b"] - base) / base if base else math.nan
            row[f"{metric}_ci_lo"] = change.lo / change.mean_a if change.mean_a else math.nan
            row[f"{metric}_ci_hi"] = change.hi / change.mean_a if change.mean_a else math.nan
            row[f"{metric}_significant"] = change.significant
            row[f"{metric}_basis"] = basis
        row["flags"] = ", ".join(sorted(set(rec["flags_a"]) | set(rec["flags_b"])))
        rows.append(row)
    return pd.DataFrame(rows)


HEADERS = ("model", "c", *[f"{m} {h}" for m in ("rps", "p99") for h in
           ("A", "B", "change", "95% CI", "verdict", "basis")], "flags")  # fmt: skip


def _pct(x: float) -> str:
    return "-" if math.isnan(x) else f"{x:+.1%}"


def print_compare(frame: pd.DataFrame, title: str, console: Console | None = None) -> None:
    console = console or wide_console()
    if frame.empty:
        console.print("no point was measured in both runs")
        return
    out = Table(title=title, header_style="bold", box=box.SIMPLE_HEAD, padding=(0, 1))
    for header in HEADERS:
        out.add_column(
            header, justify="left" if header[-5:] in ("model", "basis", "flags") else "right"
        )
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
                r[f"{metric}_basis"],
            ]
        out.add_row(*cells, r["flags"])
    console.print(out)
    n = len(frame)
    rps_sig = int(frame["rps_significant"].sum())
    p99_sig = int(frame["p99_significant"].sum())
    console.print(
        f"{rps_sig} of {n} points changed significantly in throughput, {p99_sig} of {n} in p99 "
        "(the 95% interval of the difference excludes zero)."
    )
