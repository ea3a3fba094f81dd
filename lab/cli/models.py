"""`lab models`: the server models, their knobs and their exact command lines."""

from __future__ import annotations

import shlex
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from lab.cli.common.options import renamed
from lab.cli.measure.run_options import MODELS_FILE
from lab.config.models import load_registry


@click.command("models")
@MODELS_FILE
@click.option(
    "--max-users",
    "top_level",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help="Also print each model's exact command line (as `lab serve MODEL --max-users N` starts "
    'it), with "auto" knobs resolved for N users [default: no command lines].',
)
@renamed("--commands", "top_level")
def list_models(models_file: Path | None, top_level: int | None) -> None:
    """List the server models, their knobs and (with --max-users) exact command lines."""
    registry = load_registry(models_file)
    out = Console()
    table = Table(title="models (baselines dimmed)")
    for column in ("model", "unit", "app", "a Flask app", "description"):
        table.add_column(column)
    for m in registry.models.values():
        style = "dim" if m.baseline else None
        table.add_row(m.name, m.unit, m.app, m.runs_app(), m.description, style=style)
    out.print(table)
    out.print("knob defaults: " + ", ".join(f"{k}={v}" for k, v in vars(registry.knobs).items()))
    out.print("override per run with --knob NAME=VALUE, per scenario in its \\[knobs] table")
    if top_level is not None:
        knobs = registry.knobs.resolve(top_level)
        for m in registry.models.values():
            out.print(f"\n[bold]{m.name}[/] (capacity {m.capacity(knobs)}):", highlight=False)
            out.print(shlex.join(m.command(knobs, "127.0.0.1", 8000)), markup=False)
