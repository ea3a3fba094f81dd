"""Command-line options that several `lab` commands share, declared once."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

RESULTS_DIR = Path("results")


def results_dir_option(help: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """`--out DIR`: where run directories go (and where leftovers of dead runs are looked for)."""
    return click.option(
        "--out",
        type=click.Path(file_okay=False, path_type=Path),
        default=RESULTS_DIR,
        show_default=True,
        help=help,
    )
