"""`lab reproduce NAME [--quick|--full] [--out DIR]`: rerun a published experiment here."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click
from rich.markup import escape

from experiments import (
    brownout,
    coroutines_vs_threads,
    granian_long_io,
    mixpanel,
    pool_overhead,
    uwsgi_blog,
    uwsgi_blog_postgres,
)
from experiments.common import Experiment
from experiments.common import reproduce as run_reproduction
from lab.cli.common.options import console, results_dir_option
from lab.cli.common.stopping import standalone
from lab.record.errors import EXIT_NO_ANSWER

# Every reproducible experiment by its command-line name, in the order docs/reproductions.md
# shows them (granian-long-io on a page of its own, docs/reproduce-granian.md).
ORDER = (
    pool_overhead,
    coroutines_vs_threads,
    mixpanel,
    uwsgi_blog,
    uwsgi_blog_postgres,
    brownout,
    granian_long_io,
)
EXPERIMENTS: dict[str, Experiment] = {e.name: e for e in map(Experiment.of_module, ORDER)}


def _help() -> str:
    lines = [
        "Reproduce a published concurrency experiment on this machine and print the published "
        "figures beside the measured ones (also saved as reproduction.json in a run directory). "
        "Exit code 0 when every row was measured, 1 when a row failed (its client missing or "
        "broken: the row says why), 130 / 143 / 129 when stopped.",
        "",
        "\b",
        "Experiments:",
    ]
    lines += [f"  {name:<22} {exp.summary}" for name, exp in EXPERIMENTS.items()]
    return "\n".join(lines)


@click.command("reproduce", help=_help())
@click.argument("name", type=click.Choice(list(EXPERIMENTS)))
@click.option("--quick", is_flag=True, help="Reduced protocol, about two minutes on two cores.")
@click.option("--full", is_flag=True, help="Full published size where the default is scaled down.")
@results_dir_option("Directory that receives the run directory.")
def reproduce(name: str, quick: bool, full: bool, out: Path) -> None:
    if quick and full:
        raise click.UsageError("--quick and --full exclude each other")
    exp = EXPERIMENTS[name]
    size = "quick" if quick else "full" if full else "default"
    if size not in exp.protocols:
        raise click.UsageError(f"{name} has no --{size} protocol (its default is full size)")
    run = run_reproduction(exp, size, out)
    rows = json.loads((run / "reproduction.json").read_text())["rows"]
    if failed := [f"{r['section']} ({r['failed']})" for r in rows if r.get("failed")]:
        console.print(f"[red]not every row was measured:[/] {escape('; '.join(failed))}")
        sys.exit(EXIT_NO_ANSWER)


if __name__ == "__main__":
    standalone(reproduce)
