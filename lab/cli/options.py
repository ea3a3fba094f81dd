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

# `--max-users` (lab serve, lab ui, lab models): the one name of the level "auto" knobs resolve to.
MAX_USERS_HELP = (
    'What "auto" knobs resolve to: the most simultaneous users you will drive (the threads, '
    "greenlets or coroutines per process, and the pools)."
)


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
        "--resume",
        type=click.Path(file_okay=False, exists=True, path_type=Path),
        metavar="DIR",
        help=f"{help} [default: none: a new run]",
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


class Renamed(click.Option):
    """A retired spelling of an option, hidden: what it is given goes to the option it was renamed
    to, with a one-line warning naming the new spelling, so old command lines keep working and
    their users learn the new name; both spellings at once is a usage error."""

    def __init__(self, *args: Any, target: str, **attrs: Any) -> None:
        super().__init__(*args, **{**attrs, "hidden": True, "expose_value": False})
        self.target = target

    def new_spelling(self, ctx: click.Context) -> str:
        for param in ctx.command.params:
            if param.name == self.target and not isinstance(param, Renamed):
                return param.opts[0]
        raise AssertionError(f"{self.opts[0]} renamed to {self.target}, which is not declared")

    def handle_parse_result(
        self, ctx: click.Context, opts: Any, args: list[str]
    ) -> tuple[Any, list[str]]:
        # Click processes options given on the command line before the rest, so the value moves
        # to the new option's slot before that option reads it.
        if self.name in opts:
            new = self.new_spelling(ctx)
            if self.target in opts:
                raise click.UsageError(f"{self.opts[0]} and {new} are the same option; give {new}")
            click.echo(f"{ctx.command_path}: {self.opts[0]} is deprecated; use {new}", err=True)
            opts[self.target] = opts.pop(self.name)
        return super().handle_parse_result(ctx, opts, args)


def renamed(old: str, to: str, **attrs: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """`old`, a retired spelling of the option whose parameter is `to` (see Renamed); `attrs`
    (is_flag, multiple) as the new option parses its value."""
    name = "renamed_" + old.lstrip("-").replace("-", "_")
    return click.option(old, name, cls=Renamed, target=to, **attrs)
