"""The advice on screen: one table row per model, then each model's command line, reason, limit
and projection, then the recommendation."""

from __future__ import annotations

from collections.abc import Iterator

from rich import box
from rich.markup import escape
from rich.table import Table

from lab.advise.advice import Advice, ModelAdvice

HEADERS = (
    "model",
    "your app",
    "meets",
    "configuration",
    "cores",
    "CPU %",
    "PSS MB",
    "offered",
    "rps",
    "p99 ms",
    "errors",
    "limited by",
)


def advice_table(advice: Advice) -> Table:
    title = f"lab advise: {advice.slo.words}"
    table = Table(title=title, header_style="bold", box=box.SIMPLE_HEAD, padding=(0, 1))
    for header in HEADERS:
        left = header in ("model", "your app", "configuration", "limited by", "meets")
        table.add_column(header, justify="left" if left else "right", no_wrap=True)
    for m in advice.models:
        table.add_row(*_cells(m), style="green" if m.meets else None)
    return table


def _cells(m: ModelAdvice) -> tuple[str, ...]:
    c = m.confirm
    figures = (
        (f"{c.rate_rps:,g}", f"{c.throughput_rps:,.1f}", _p99(c.p99_ms), f"{c.errors}")
        if c
        else ("-",) * 4
    )
    measured = (f"{m.cores}", f"{m.cpu_pct:.0f}", f"{m.pss_mb:.0f}") if c else ("-",) * 3
    meets = "yes" if m.meets else "no"
    app = m.runs_app
    return (m.model, app, meets, m.configuration or "-", *measured, *figures, m.limited_by or "-")


def _p99(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def details(advice: Advice) -> Iterator[str]:
    """Per model, in rich markup: the command line, why it meets or not, what limits it, and
    the projection; last, the recommendation."""
    for m in advice.models:
        mark = "[green]meets[/]" if m.meets else "[red]does not meet[/]"
        yield f"[bold]{escape(m.model)}[/] {mark}: {escape(m.reason)}"
        if m.command:
            yield f"  {'command' if m.meets else 'measured with'}: {escape(m.command)}"
        if m.limit and m.limit != m.reason:
            yield f"  limited by {escape(m.limit)}"
        if m.projection:
            yield f"  {escape(m.projection)}"
    yield f"[bold]{escape(advice.sentence())}[/]"
    if not advice.complete:
        yield "[yellow]the search did not finish: continue it with lab advise --resume[/]"
