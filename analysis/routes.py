"""A traffic mix, route by route: each route's p50 and p99 beside the mix's, in the summary,
the report and a comparison of two runs.

Each route's percentiles come from its own HdrHistogram (`lab.run.routestep`: the step's
`.routes.hlog`), trials merged by adding counts, never from the mix's: a description. A route's
p99 is given only where at least `MIN_BEYOND` answers lie beyond it in its thinnest trial, the
rule of the one test of difference (`lab.verdict.difference.tail`, not a copy of it); with
fewer, the table says "too few" and how many answers there were. `lab compare`'s per-route p99
change is a claim: the one test over the trials' own route p99s (the figures it prints), its
interval beside it, the routes' changes one family corrected for their number
(Benjamini-Hochberg).
"""

from __future__ import annotations

import html
from collections import defaultdict
from pathlib import Path

import pandas as pd
from hdrh.histogram import HdrHistogram
from rich import box
from rich.console import Console
from rich.table import Table

from analysis.loading import Run, read_hlog_safe
from lab.record import hist
from lab.record.step import StepRecord
from lab.verdict.difference import (
    CORRECTION,
    MIN_BEYOND,
    TOO_FEW,
    Side,
    corrected,
    differ,
    tail,
)

MIX = "(mix)"  # the row of the whole mix, the step's own figures
COLUMNS = ["model", "level", "route", "share", "answers", "p50_ms", "p99_ms", "p99_enough"]
COLUMNS += ["tail"]  # the route's p99 as the one test compares it (its trials')


def _route_hists(run_dir: Path, record: StepRecord) -> dict[str, HdrHistogram]:
    """Each route's histogram of one step, from its `.routes.hlog` by tag ({}: not found)."""
    by_tag = {r["tag"]: label for label, r in record.load.routes.items() if "tag" in r}
    files = {r.get("histogram", "") for r in record.load.routes.values()} - {""}
    out: dict[str, HdrHistogram] = {}
    for name in files:
        for h in read_hlog_safe(run_dir / name):  # a half-written file: what is complete
            if (label := by_tag.get(h.get_tag() or "")) is not None:
                out[label] = h
    return out


def route_table(records: list[StepRecord], run_dir: Path) -> pd.DataFrame:
    """One row per model, level and route (and the mix's), trials merged; empty: no mix."""
    merged: dict[tuple[str, float, str], HdrHistogram] = {}
    trials: dict[tuple[str, float, str], list[HdrHistogram]] = defaultdict(list)
    shares: dict[str, float] = {}
    labels: dict[tuple[str, float], str] = {}
    mix: dict[tuple[str, float], list[StepRecord]] = defaultdict(list)
    for r in records:
        if not r.load.routes or r.status != "measured":
            continue
        point = (r.model, r.key.level)
        labels[point] = r.key.label
        mix[point].append(r)
        for label, h in _route_hists(run_dir, r).items():
            merged.setdefault((*point, label), hist.new_histogram()).add(h)
            trials[(*point, label)].append(h)
            shares[label] = float(r.load.routes[label].get("share", 0.0))
    rows = []
    for point, steps in sorted(mix.items()):
        each = [hist.merge(read_hlog_safe(run_dir / s.histogram)) for s in steps if s.histogram]
        whole = hist.merge(each)
        flags = [f for s in steps for f in s.evidence.flags]
        rows.append(_row(point, labels[point], MIX, 1.0, whole, each, flags))
        for (model, level, label), h in sorted(merged.items()):
            if (model, level) == point:
                share, each = shares.get(label, 0.0), trials[(model, level, label)]
                rows.append(_row(point, labels[point], label, share, h, each, flags))
    return pd.DataFrame(rows, columns=COLUMNS)


def _row(
    point: tuple[str, float],
    label: str,
    route: str,
    share: float,
    h: HdrHistogram,
    each: list[HdrHistogram],
    flags: list[str],
) -> list[object]:
    """One route of one point: merged figures to show, and its trials' p99s as a side."""
    n = h.get_total_count()
    figures = hist.summary_ms(h) if n else {"p50": float("nan"), "p99": float("nan")}
    p99s = [hist.summary_ms(t)["p99"] for t in each if t.get_total_count()]
    side = tail(p99s, [t.get_total_count() for t in each], flags)
    enough = TOO_FEW not in side.unfit
    return [point[0], label, route, share, n, figures["p50"], figures["p99"], enough, side]


def _p99(rec: dict[str, object]) -> str:
    """The p99, and "too few" beside it where fewer than MIN_BEYOND answers lie beyond it."""
    if not rec["answers"]:
        return "-"
    value = f"{rec['p99_ms']:.1f}"
    return value if rec["p99_enough"] else f"{value} (too few: {rec['answers']} answers)"


def heaviest(frame: pd.DataFrame, records: list[StepRecord]) -> pd.DataFrame:
    """Each model's rows at its heaviest level: what the summary shows."""
    top: dict[str, tuple[float, str]] = {}
    for r in records:
        if r.load.routes and r.key.level >= top.get(r.model, (0.0, ""))[0]:
            top[r.model] = (r.key.level, r.key.label)
    keep = frame.apply(lambda row: top.get(row["model"], (0, ""))[1] == row["level"], axis=1)
    return frame[keep] if len(frame) else frame


def rich_table(frame: pd.DataFrame, title: str) -> Table:
    out = Table(title=title, header_style="bold", box=box.SIMPLE_HEAD, padding=(0, 1))
    for header in ("model", "level", "route", "share", "answers", "p50 ms", "p99 ms"):
        out.add_column(header, justify="left" if header in ("model", "route") else "right")
    for rec in frame.to_dict("records"):
        share = "" if rec["route"] == MIX else f"{100 * rec['share']:.0f}%"
        p50 = f"{rec['p50_ms']:.1f}" if rec["answers"] else "-"
        style = "bold" if rec["route"] == MIX else None
        cells = (rec["model"], rec["level"], rec["route"], share, str(rec["answers"]), p50)
        out.add_row(*cells, _p99(rec), style=style)
    return out


def summary_tables(records: list[StepRecord], run_dir: Path) -> list[Table]:
    """The summary's per-route table at each model's heaviest level ([]: no mix)."""
    frame = route_table(records, run_dir)
    if frame.empty:
        return []
    title = f"per route, each model's heaviest level (p99 given with {MIN_BEYOND}+ beyond it)"
    return [rich_table(heaviest(frame, records), title)]


def routes_html(records: list[StepRecord], run_dir: Path) -> str:
    """The report's per-route table, every level ("": no mix)."""
    frame = route_table(records, run_dir)
    if frame.empty:
        return ""
    head = "".join(f"<th>{h}</th>" for h in ("model", "level", "route", "share", "answers"))
    rows = []
    for rec in frame.to_dict("records"):
        share = "" if rec["route"] == MIX else f"{100 * rec['share']:.0f}%"
        p50 = f"{rec['p50_ms']:.1f}" if rec["answers"] else "-"
        cells = (rec["model"], rec["level"], rec["route"], share, rec["answers"], p50, _p99(rec))
        rows.append("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in cells) + "</tr>")
    return (
        "<h2>Per route</h2><p>Each route of the mix from its own histogram, beside the mix's; a "
        f"p99 is given where at least {MIN_BEYOND} answers lie beyond "
        f"it.</p><table><tr>{head}<th>p50 ms</th><th>p99 ms</th></tr>{''.join(rows)}</table>"
    )


def print_route_compare(a: Run, b: Run, title: str, console: Console) -> None:
    """`lab compare`'s per-route table, where both runs swept a mix."""
    table = compare_table(route_table(a.records, a.run_dir), route_table(b.records, b.run_dir))
    if table is not None:
        table.title = title
        console.print(table)


def compare_table(a: pd.DataFrame, b: pd.DataFrame) -> Table | None:
    """Per route and point measured in both runs: p50 of A and B, and the p99 change as the one
    test of difference calls it, corrected (BH) over every route and point compared (None: no
    mix, or no point and route in both)."""
    both = a.merge(b, on=["model", "level", "route"], suffixes=("_a", "_b"))
    if both.empty:
        return None
    out = Table(header_style="bold", box=box.SIMPLE_HEAD, padding=(0, 1))
    for header in ("model", "level", "route", "p50 A", "p50 B", "p99 A", "p99 B", "p99 change"):
        out.add_column(header, justify="left" if header in ("model", "route") else "right")
    rows = both.to_dict("records")
    diffs = [differ(r["tail_a"], r["tail_b"]) for r in rows]
    changed = corrected([d.p for d in diffs])
    for r, d, claim in zip(rows, diffs, changed, strict=True):
        change = "too few" if d.basis == TOO_FEW else d.percent()
        change = f"[bold]{change} *[/]" if claim else change
        cells = (r["model"], r["level"], r["route"], f"{r['p50_ms_a']:.1f}", f"{r['p50_ms_b']:.1f}")
        out.add_row(*cells, _ms(r["tail_a"]), _ms(r["tail_b"]), change)
    tested = sum(d.compared for d in diffs)
    out.caption = (
        f"{sum(changed)} of {tested} route p99s tested changed (*), {CORRECTION} for their number; "
        "p99 A and B are the trials' mean, the figures tested"
    )
    return out


def _ms(side: Side) -> str:
    return "-" if side.value != side.value else f"{side.value:.1f}"
