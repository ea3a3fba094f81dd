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
from servers.common import DB_DRIVERS

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


# `lab run` and `lab advise`: the mock upstream's routes, and the databases.
UPSTREAM_ROUTE = click.option(
    "--upstream-route",
    "upstream_routes",
    multiple=True,
    metavar="RULE",
    help="The mock upstream's answer on one route, [METHOD ]/PATH=DELAY[ STATUS[ BODY]], e.g. "
    "'POST /v1/charges=250ms' or '/v1/users/*=30ms 404' (repeatable; replaces the scenario's "
    "[upstream] routes); every other path waits --delay-ms.",
)
DB_OPTIONS: tuple[Callable[[Callable[..., Any]], Callable[..., Any]], ...] = (
    click.option(
        "--db-url",
        "db_urls",
        multiple=True,
        metavar="URL",
        help="Your own database (postgresql://... or redis://...) instead of one the lab starts; "
        "loopback only unless --allow-remote.",
    ),
    click.option(
        "--db-setup",
        "db_setup",
        multiple=True,
        metavar="COMMAND",
        help="With --app: a command run once against the lab's databases before the check, in "
        "the app's directory and environment, placeholders too (repeatable, in order), e.g. "
        "'flask db upgrade' or 'psql {postgres_url} -f seed.sql'; every model then starts from "
        "a fresh copy of the result.",
    ),
    click.option(
        "--db-seed",
        type=click.Path(dir_okay=False, path_type=Path),
        help="With --app: a plain SQL file or a pg_dump custom archive loaded after --db-setup.",
    ),
    click.option(
        "--db-durability",
        type=click.Choice(["production", "fast"]),
        default="production",
        show_default=True,
        help="The lab's PostgreSQL: production keeps fsync and synchronous commit on; fast turns "
        "them and full-page writes off (writes cost less than in production; named in the "
        "record and the summary).",
    ),
    click.option(
        "--db-driver",
        type=click.Choice(list(DB_DRIVERS)),
        help="PostgreSQL driver of the WSGI app's /db [default: psycopg2-green].",
    ),
)
