"""The compact terminal table printed after every run, with the report's own claims
(`analysis.claims`: made once, rendered by both)."""

from __future__ import annotations

import math
from collections.abc import Mapping

import pandas as pd
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from analysis.claims import Claims, claims
from analysis.loading import Run
from analysis.metrics import flagged, point_table, unmeasured
from analysis.routes import summary_tables
from lab.record.models import models_run_app
from lab.record.step import StepRecord, level_label
from lab.verdict.facts import generators_needed

COLUMNS = [  # (column, header, format)
    ("model", "model", "{}"),
    ("concurrency", "c", "{}"),
    ("rps", "rps", "{:.1f}"),
    ("ideal_rps", "ideal", "{:.0f}"),
    ("efficiency", "eff", "{:.2f}"),
    ("p50_ms", "p50 ms", "{:.1f}"),
    ("p99_ms", "p99 ms", "{:.1f}"),
    ("p99_all_ms", "p99 all", "{:.1f}"),  # over every request: failures, drops and all
    ("cpu_ms_per_req", "CPU ms/req", "{:.2f}"),
    ("limited_by", "limited by", "{}"),
    ("errors", "errors", "{}"),
    ("server_cpu_pct", "srv CPU%", "{:.0f}"),
    ("server_pss_mb", "PSS MB", "{:.0f}"),
    ("client_cpu_pct", "cli CPU%", "{:.0f}"),
]


def wide_console() -> Console:
    """A console for tables: piped or logged output is not squeezed into 80 columns."""
    console = Console()
    return console if console.is_terminal else Console(width=180)


def _cell(value: object, spec: str) -> str:
    if isinstance(value, float) and math.isnan(value):
        return "-"
    return spec.format(value)


def summary_table(
    table: pd.DataFrame, title: str = "", runs_app: Mapping[str, str] | None = None
) -> Table:
    """The per-point table; `runs_app` (model -> as is, bridged, async port) adds the column
    that says how each model runs the user's app."""
    out = Table(title=title, header_style="bold", box=box.SIMPLE_HEAD, padding=(0, 1))
    for _, header, _ in COLUMNS:
        out.add_column(header, justify="left" if header == "model" else "right", no_wrap=True)
    if runs_app:
        out.add_column("your app", justify="left", no_wrap=True)
    out.add_column("flags", justify="left")
    previous = None
    for rec in table.to_dict("records"):
        if previous is not None and rec["model"] != previous:
            out.add_section()
        previous = rec["model"]
        cells = [_cell(rec[k], spec) for k, _, spec in COLUMNS]
        for i, (k, _, _) in enumerate(COLUMNS):  # open loop: unfinished requests' ages count
            if k[:-3] in rec.get("latency_lower_bounds", ()) or (
                k == "p99_all_ms" and rec.get("p99_all_bound")
            ):
                cells[i] = "≥" + cells[i]
        if not math.isnan(rec["rps_lo"]):
            cells[2] += f" ±{(rec['rps_hi'] - rec['rps_lo']) / 2:.0f}"
        style = "red" if not rec["fair"] else ("yellow" if rec["flags"] else None)
        app = [runs_app.get(rec["model"], "-")] if runs_app else []
        out.add_row(*cells, *app, ", ".join(rec["flags"]), style=style)
    return out


def print_summary(
    run: Run,
    console: Console | None = None,
    table: pd.DataFrame | None = None,
    said: Claims | None = None,
) -> pd.DataFrame:
    """Print the per-point table and the verdict; return the point table for further use.
    `table` and `said`: the run's point table and claims where the caller made them (`lab
    report` renders the same claims into report.html)."""
    console = console or wide_console()
    table = point_table(run) if table is None else table
    name = run.manifest.get("run_id", run.run_dir.name)
    for rec in unmeasured(run).to_dict("records"):
        console.print(f"[bold red]{rec['model']}: no measured step ({escape(str(rec['why']))})")
    if table.empty:
        console.print(f"[bold]{name}[/]: no step measured yet")
        return table
    scen = run.manifest.get("scenario", {})
    title = f"{name}: {scen.get('name', '?')}, d = {run.delay_ms:g} ms, ideal = c/d"
    console.print(summary_table(table, title, models_run_app(run.manifest)))
    for routes in summary_tables(run.records, run.run_dir):  # a traffic mix, route by route
        console.print(routes)
    said = claims(run, table) if said is None else said
    for line in [*said.ranking, *said.limits]:
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    for line in said.answer:
        console.print(f"[bold]{escape(line)}[/]", highlight=False, soft_wrap=True)
    cross = said.crossings
    for rec in cross[cross["clear"]].to_dict("records") if not cross.empty else []:
        what = "throughput" if rec["metric"] == "rps" else "p99"
        console.print(
            f"crossover on {what}: {rec['overtaker']} overtakes {rec['overtaken']} between "
            f"{rec['from_concurrency']} and {level_label(rec['concurrency'])}"
        )
    if said.crossing_count:
        console.print(f"[dim]crossovers: {said.crossing_count} (all listed in report.html)[/]")
    if run.manifest.get("databases", {}).get("durability") == "fast":
        console.print(
            "[bold yellow]PostgreSQL ran with --db-durability fast (fsync, synchronous commit and "
            "full-page writes off): writes cost less than in production[/]"
        )
    unfair = sorted(table.loc[~table["fair"], "model"].unique())
    if unfair:
        console.print(
            f"[bold red]not a fair result, excluded from the verdict: {', '.join(unfair)}"
        )
    for line in said.instrument:
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    if advice := generators_advice(run.records):
        console.print(f"[yellow]{advice}", highlight=False)
    n_flagged = len(flagged(table))
    if n_flagged:
        console.print(f"[yellow]{n_flagged} flagged point(s); reasons in report.html")
    return table


def generators_advice(records: list[StepRecord]) -> str:
    """How many generator processes the worst `client_saturated` step would have needed
    (its client CPU / 90% of a core, rounded up), or "" when no step was saturated or where more
    generators cannot help (its limit: the server's CPU, a connection per request, a full host)."""
    worst: tuple[int, StepRecord] | None = None
    for r in records:
        if "client_saturated" not in r.evidence.flags or r.evidence.limited_by not in (
            "apparatus",
            "",
        ):
            continue
        evidence = r.evidence.details.get("client_saturated")
        need = (
            int(evidence["generators_needed"])
            if isinstance(evidence, dict) and "generators_needed" in evidence
            else generators_needed(r.resources.client_cpu_pct)
        )
        if worst is None or need > worst[0]:
            worst = (need, r)
    if worst is None:
        return ""
    need, r = worst
    count = sum("client_saturated" in x.evidence.flags for x in records)
    return (
        f"client_saturated on {count} step(s): the load generator, not the server, may be the "
        f"limit (worst: {r.model} {r.key.label}, client CPU {r.resources.client_cpu_pct:.0f}% on "
        f"{r.load.generators} generator process(es)); it needs at least {need} generator processes "
        f"on cores of their own: rerun with --generators {need} (or add machines with "
        "--remote-generators and `lab generator --connect`)"
    )
