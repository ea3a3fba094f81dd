"""Command-line options that several `lab` commands share, declared once, and their console."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from lab.config.models import parse_knobs
from lab.record.errors import LabError, Refused

RESULTS_DIR = Path("results")

console = Console(stderr=True, soft_wrap=True)  # what the commands say; results go to stdout


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


def port_option(default: int, help: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """`--port N`: where a command's own listener binds (lab serve, lab ui, lab upstream)."""
    return click.option(
        "--port", default=default, show_default=True, type=click.IntRange(1, 65535), help=help
    )


def resume_option(help: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """`--resume DIR`: an existing run directory to continue (lab run, lab advise)."""
    return click.option(
        "--resume", type=click.Path(file_okay=False, exists=True, path_type=Path), help=help
    )


def ensure_writable(path: Path, what: str) -> None:
    """Create `path` and prove a file can be written there, before anything starts."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as e:
        raise Refused(f"{what} {path}: cannot write there: {e.strerror or e}") from None


def _numbers(value: str | None, parse: type[float], kind: str, each: str) -> tuple[Any, ...] | None:
    """A comma-separated list of positive finite numbers, or a usage error naming what is wrong."""
    if value is None:
        return None
    try:
        numbers = tuple(parse(v) for v in value.split(",") if v.strip())
    except ValueError:
        raise click.BadParameter(f"expected {kind} separated by commas, got {value!r}") from None
    if not numbers or any(not 0 < v < float("inf") for v in numbers):
        raise click.BadParameter(f"every {each}, got {value!r}")
    return numbers


def int_list(_: object, __: click.Parameter, value: str | None) -> tuple[int, ...] | None:
    return _numbers(value, int, "whole numbers", "value must be a positive whole number")


def rate_list(_: object, __: click.Parameter, value: str | None) -> tuple[float, ...] | None:
    return _numbers(value, float, "numbers", "rate must be a positive number")


def name_list(_: object, __: click.Parameter, value: str | None) -> tuple[str, ...] | None:
    return None if value is None else tuple(v.strip() for v in value.split(",") if v.strip())


def knob_pairs(_: object, __: click.Parameter, value: tuple[str, ...]) -> dict[str, int | str]:
    try:
        return parse_knobs(value)
    except LabError as e:
        raise click.BadParameter(str(e)) from None


def positive(_: object, param: click.Parameter, value: float | None) -> float | None:
    if value is not None and value <= 0:
        raise click.BadParameter(f"must be positive, got {value}")
    return value
