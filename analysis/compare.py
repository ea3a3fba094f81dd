"""Compare two runs point by point: the change in throughput and p99, and whether it is real.

A change is significant when its 95% interval excludes zero, the interval built by
`analysis.noise`: with at least two trials per point in both runs, Welch's over the trials
(throughput and per-trial p99); with single trials (`quick`), the step's seconds (Welch over
per-second throughput, a block bootstrap of the per-second histograms for p99: slow requests come
in bursts) widened by the run-to-run floor the lab measured by A/A runs, since a step's seconds
cannot see what differs between runs. A p99 is compared only where ten or more requests lie
beyond it in both runs, and never finer than the instrument's 15% / 3 ms. The basis column says
which was used. The values shown are always each run's point values (median throughput,
merged-histogram p99).

What limits each point (`limited_by`) is shown for both runs: a change in throughput that comes
with a change of limit (`none -> server_cpu`) says why it changed, not only that it did.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd
from rich import box
from rich.console import Console
from rich.table import Table

from analysis.loading import POINT, Run
from analysis.metrics import point_table
from analysis.noise import (
    BUDGET_MS,
    BUDGET_SHARE,
    MIN_BEYOND,
    TOO_FEW,
    Floor,
    floor,
    p99_change,
    rps_change,
)
from analysis.stats import Change
from analysis.summary import wide_console
from lab.record.flags import excluding

Key = tuple[str, str, int]  # (model, mode, concurrency): one point of a run
FLAGGED = "flagged"  # the basis of a point not a fair result in either run: compared with nothing


def _trials(run: Run, key: Key, column: str) -> list[float]:
    steps = run.steps
    sel = steps[(steps["model"] == key[0]) & (steps["mode"] == key[1])]
    values: list[float] = sel.loc[sel["concurrency"] == key[2], column].astype(float).tolist()
    return values


def _seconds(run: Run, key: Key) -> list[float]:
    ts = run.timeseries
    if ts.empty:
        return []
    sel = ts[(ts["model"] == key[0]) & (ts["mode"] == key[1]) & (ts["concurrency"] == key[2])]
    values: list[float] = sel["rps"].dropna().astype(float).tolist()
    return values


def _throughput_change(a: Run, b: Run, key: Key, noise: Floor) -> tuple[Change, str]:
    trials = (_trials(a, key, "throughput_rps"), _trials(b, key, "throughput_rps"))
    return rps_change(trials, (_seconds(a, key), _seconds(b, key)), noise)


def _p99_change(a: Run, b: Run, key: Key, noise: Floor) -> tuple[Change, str]:
    trials = (_trials(a, key, "p99_ms"), _trials(b, key, "p99_ms"))
    return p99_change((a.seconds.get(key, []), b.seconds.get(key, [])), trials, noise)


def compare(a: Run, b: Run, noise: Floor | None = None) -> pd.DataFrame:
    """One row per point present in both runs: values, relative change, its interval, verdict
    (`noise`: the run-to-run floor, the committed calibration unless given)."""
    noise = floor() if noise is None else noise
    ta, tb = point_table(a), point_table(b)
    if ta.empty or tb.empty:
        return pd.DataFrame()
    both = ta.merge(tb, on=POINT, suffixes=("_a", "_b"))
    rows = []
    nan = float("nan")
    for rec in both.to_dict("records"):
        key = (rec["model"], rec["mode"], int(rec["concurrency"]))
        row = {k: rec[k] for k in POINT}
        unfair = excluding(rec["flags_a"]) or excluding(rec["flags_b"])
        for metric, column, test in (
            ("rps", "rps", _throughput_change),
            ("p99", "p99_ms", _p99_change),
        ):
            change, basis = test(a, b, key, noise)
            if unfair:  # a step that is not a fair result is never called changed, as never best
                change, basis = Change(change.mean_a, change.mean_b, change.diff, nan, nan), FLAGGED
            base = rec[f"{column}_a"]
            row[f"{metric}_a"] = base
            row[f"{metric}_b"] = rec[f"{column}_b"]
            answered = rec["ok_a"] > 0 and rec["ok_b"] > 0  # no answers: never a ratio
            change_ab = (rec[f"{column}_b"] - base) / base if base and answered else math.nan
            row[f"{metric}_change"] = change_ab
            row[f"{metric}_ci_lo"] = change.lo / change.mean_a if change.mean_a else math.nan
            row[f"{metric}_ci_hi"] = change.hi / change.mean_a if change.mean_a else math.nan
            row[f"{metric}_significant"] = change.significant
            row[f"{metric}_basis"] = basis
        row["limited_by_a"], row["limited_by_b"] = rec["limited_by_a"], rec["limited_by_b"]
        row["flags"] = ", ".join(sorted(set(rec["flags_a"]) | set(rec["flags_b"])))
        rows.append(row)
    return pd.DataFrame(rows)


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
    """'+3.8% [-2.7%, +9.8%]', bold and starred when the interval excludes zero; a p99 with too
    few requests beyond it is not compared."""
    if r[f"{metric}_basis"] in (TOO_FEW, FLAGGED):
        return f"{_pct(r[f'{metric}_change'])} [not compared]  "
    lo, hi = _pct(r[f"{metric}_ci_lo"]), _pct(r[f"{metric}_ci_hi"])
    text = f"{_pct(r[f'{metric}_change'])} [{lo}, {hi}]"
    return f"[bold]{text} *[/]" if r[f"{metric}_significant"] else f"{text}  "


def print_compare(
    frame: pd.DataFrame, title: str, console: Console | None = None, noise: Floor | None = None
) -> None:
    console = console or wide_console()
    noise = floor() if noise is None else noise
    if frame.empty:
        console.print("no point was measured in both runs")
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
    moved = int((frame["limited_by_a"] != frame["limited_by_b"]).sum())
    few = int((frame["p99_basis"] == TOO_FEW).sum())
    unfair = int((frame["rps_basis"] == FLAGGED).sum())
    console.print(
        f"{rps_sig} of {n} points changed significantly (*) in throughput, {p99_sig} of {n} in "
        f"p99: their 95% interval of the change excludes zero. {unfair} of {n} not compared "
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
