"""Command-line options that several `lab` commands share, declared once."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from lab.record.errors import Refused

RESULTS_DIR = Path("results")


def _out_dir(_: click.Context, __: click.Parameter, value: str) -> Path:
    """An empty `--out` would silently mean the current directory: refuse it (and files)."""
    if not value.strip():
        raise click.BadParameter("must name a directory, got an empty string")
    path = Path(value)
    if path.exists() and not path.is_dir():
        raise click.BadParameter(f"{value} exists and is not a directory")
    return path


def results_dir_option(help: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """`--out DIR`: where run directories go (and where leftovers of dead runs are looked for)."""
    return click.option(
        "--out",
        default=str(RESULTS_DIR),
        show_default=True,
        callback=_out_dir,
        metavar="DIR",
        help=help,
    )


def ensure_writable(path: Path, what: str) -> None:
    """Create `path` and prove a file can be written there, before anything starts."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as e:
        raise Refused(f"{what} {path}: cannot write there: {e.strerror or e}") from None
