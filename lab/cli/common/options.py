"""Command-line options that several `lab` commands share, declared once, their console, the
retired spellings that still work (`renamed`) and what each option name means (`MEANINGS`)."""

from __future__ import annotations

import tempfile
import tomllib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from lab.config.models import parse_knobs
from lab.config.scenario import ENGINES, LIMITS
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


Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]  # what click.option returns


def shown(*decls: str, default: Any, help: str, type: Any = None, **attrs: Any) -> Decorator:
    """An option whose default `--help` shows: every `lab` command shows the value an option
    takes when it is not given, so neither the help nor docs/running.md leave it to guess."""
    return click.option(*decls, type=type, default=default, show_default=True, help=help, **attrs)


def choice_option(*decls: str, choices: Iterable[str], default: str, help: str) -> Decorator:
    """One of a few names (--front, --backend, --db-durability, ...), the default shown."""
    return shown(*decls, type=click.Choice(list(choices)), default=default, help=help)


def count_option(*decls: str, least: int, default: int, help: str) -> Decorator:
    """A whole number of something (generator processes, steps), at least `least`, the default
    shown."""
    return shown(*decls, type=click.IntRange(min=least), default=default, help=help)


def share_option(*decls: str, help: str) -> Decorator:
    """A share of requests from 0 to 1 (of errors, of stalls, of failures allowed), 0 unless
    given."""
    return shown(*decls, type=click.FloatRange(0, 1), default=0.0, help=help)


def file_option(*decls: str, help: str, **attrs: Any) -> Decorator:
    """An option naming a FILE, given to the command as a Path; whether it must exist is the
    command's own check, so its refusal says what the file was for."""
    path = click.Path(dir_okay=False, path_type=Path)
    return click.option(*decls, type=path, metavar="FILE", help=help, **attrs)


def dir_option(*decls: str, help: str, **attrs: Any) -> Decorator:
    """An option naming a directory, given to the command as a Path (checked as file_option)."""
    return click.option(
        *decls, type=click.Path(file_okay=False, path_type=Path), help=help, **attrs
    )


def results_dir_option(help: str) -> Decorator:
    """`--out DIR`: where run directories go (and where leftovers of dead runs are looked for)."""
    return click.option(
        "--out",
        default=str(RESULTS_DIR),
        show_default=True,
        callback=_out_dir,
        metavar="DIR",
        help=help,
    )


def port_option(default: int, help: str) -> Decorator:
    """`--port N`: where a command's own listener binds (lab serve, lab ui, lab upstream)."""
    return click.option(
        "--port", default=default, show_default=True, type=click.IntRange(1, 65535), help=help
    )


def max_users_option(dest: str) -> Decorator:
    """`--max-users N` (lab serve, lab ui): the one name of the level "auto" knobs resolve to,
    into the command's parameter `dest`."""
    return click.option(
        "--max-users",
        dest,
        default=200,
        show_default=True,
        type=click.IntRange(min=1),
        help='What "auto" knobs resolve to: the most simultaneous users you will drive (the '
        "threads, greenlets or coroutines per process, and the pools).",
    )


def delay_ms_option(help: str) -> Decorator:
    """`--delay-ms MS` of an upstream a command starts (lab upstream, lab ui): 100 ms unless
    given, within the upstream's own limit."""
    return click.option(
        "--delay-ms",
        default=100.0,
        show_default=True,
        type=click.FloatRange(0, LIMITS["delay_ms"]),
        help=help,
    )


def resume_option(help: str) -> Decorator:
    """`--resume DIR`: an existing run directory to continue (lab run, lab advise)."""
    return click.option(
        "--resume",
        type=click.Path(file_okay=False, exists=True, path_type=Path),
        metavar="DIR",
        help=f"{help.rstrip('.')} [default: none: a new run].",
    )


def from_scenario(value: object, own: bool = True) -> str:
    """The default of an option that overrides a scenario field: the scenario's, shown with the
    default scenario's value, read from it so the help cannot drift from the file; `own=False`
    for a command without `--scenario` (`lab advise`), whose base is the quick scenario."""
    if isinstance(value, tuple):
        value = ",".join(f"{v:g}" if isinstance(v, float) else str(v) for v in value)
    elif isinstance(value, float):
        value = f"{value:g}"
    return f"[default: the scenario's; quick: {value}]" if own else f"[default: {value}]"


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


# `lab run` and `lab advise`: the steps' engine, the mock upstream's routes, the databases.
ENGINE = click.option(
    "--engine",
    type=click.Choice(list(ENGINES)),
    help="What sends a step's requests, open or closed loop: oha where it can run the step (one "
    "fixed request), else the lab's own, saying why (a mix, placeholders, a login, Poisson "
    "arrivals, fewer users than generator processes, oha missing); remote generators run their "
    "share on their own oha; lab: the lab's own everywhere [default: oha].",
)
UPSTREAM_ROUTE = click.option(
    "--upstream-route",
    "upstream_routes",
    multiple=True,
    metavar="RULE",
    help="The mock upstream's answer on one route, [METHOD ]/PATH=DELAY[ STATUS[ BODY]], e.g. "
    "'POST /v1/charges=250ms' or '/v1/users/*=30ms 404' (repeatable; in `lab run`, "
    "replaces its scenario's [upstream] routes); every other path waits --delay-ms.",
)
DB_OPTIONS: tuple[Decorator, ...] = (
    click.option(
        "--db-url",
        "db_urls",
        multiple=True,
        metavar="URL",
        help="Your own database (postgresql://... or redis://...) instead of one the lab starts "
        "(repeatable); loopback only unless --allow-remote.",
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
    file_option(
        "--db-seed",
        help="With --app: a plain SQL file or a pg_dump custom archive loaded after --db-setup "
        "[default: none].",
    ),
    choice_option(
        "--db-durability",
        choices=("production", "fast"),
        default="production",
        help="The lab's PostgreSQL: production keeps fsync and synchronous commit on; fast turns "
        "them and full-page writes off (writes cost less than in production; named in the "
        "record and the summary).",
    ),
    click.option(
        "--db-driver",
        type=click.Choice(list(DB_DRIVERS)),
        help="PostgreSQL driver of the WSGI app's /db [default: psycopg2-green].",
    ),
    click.option(
        "--allow-writes",
        is_flag=True,
        help="With --app and --db-url: let routes other than GET, HEAD and OPTIONS run against "
        "your own database (refused without it: the check and the sweep would write to it).",
    ),
)

# `lab run --app` and `lab advise --app`: a login each simulated user sends once (lab.record.login)
LOGIN_ONLY = {  # option -> its parameter: meaningful with --app only
    **{"login": "login", "login-body": "login_body", "login-header": "login_headers"},
    **{"csrf": "csrf", "login-page": "login_page", "login-cookie": "login_cookie"},
}
LOGIN_OPTIONS = (
    click.option(
        "--login",
        metavar="'METHOD /PATH'",
        help="With --app: a login each simulated user sends once before its first request, e.g. "
        "'POST /login'; its cookies are kept for all its later requests (one session per user), "
        "logins are counted and timed apart from the mix, and a login that answers neither "
        "2xx nor 3xx, or sets no session cookie, refuses the app in the check "
        "[default: none: anonymous users, no cookies kept].",
    ),
    click.option(
        "--login-body",
        metavar="TEXT",
        help="With --login: its body, a form ('username=alice&password=secret') or JSON; the "
        "Content-Type follows unless --login-header gives one [default: none: an empty body].",
    ),
    click.option(
        "--login-header",
        "login_headers",
        multiple=True,
        metavar="'NAME: VALUE'",
        help="With --login: a header of the login request (repeatable) [default: none; --header "
        "goes with the routes, not the login].",
    ),
    click.option(
        "--csrf",
        metavar="SOURCE:NAME=TARGET:NAME[,TARGET:NAME]",
        help="With --login: where its CSRF token is read (cookie, or a hidden input of the login "
        "form, fetched with a GET of the login page first) and where it is sent (header, sent "
        "with the login and every later write of the user; or field, added to the login's "
        "form): Django: cookie:csrftoken=header:X-CSRFToken; Flask-WTF: "
        "form:csrf_token=field:csrf_token [default: none].",
    ),
    click.option(
        "--login-page",
        metavar="/PATH",
        help="With --login: the page fetched with a GET before the login [default: the "
        "login's own path, where --csrf is given; else none].",
    ),
    click.option(
        "--login-cookie",
        metavar="NAME",
        help="With --login: the session cookie the login must set, e.g. sessionid [default: "
        "any cookie but the CSRF one].",
    ),
)

# The app's own environment (`lab run`, `lab advise`, `lab routes`): where it is imported and run.
APP_ENVIRONMENT = (
    file_option(
        "--app-requirements",
        help="With --app: the app's own pins (a requirements, constraints or `pip freeze` "
        "file). The import check (and `lab routes`) and the setup commands run in a venv of "
        "these, each model in one of these plus its server's packages, built once and cached "
        "(LAB_CACHE_DIR); a pin a server cannot live with is refused, named [default: the "
        "lab's own environment].",
    ),
    dir_option(
        "--app-venv",
        metavar="DIR",
        help="With --app: the app's existing venv. The import check (and `lab routes`) and the "
        "setup commands run in it, each model in a venv of its `pip freeze` plus the server's "
        "packages (DIR is never written to) [default: none: the lab's own environment].",
    ),
)


def app_environment_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Declare APP_ENVIRONMENT on a plain click command (`lab routes`; `lab run` and `lab
    advise` take it within appmix.APP_CORE)."""
    for option in reversed(APP_ENVIRONMENT):
        command = option(command)
    return command


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


def renamed(old: str, to: str, **attrs: Any) -> Decorator:
    """`old`, a retired spelling of the option whose parameter is `to` (see Renamed); `attrs`
    (is_flag, multiple) as the new option parses its value."""
    name = "renamed_" + old.lstrip("-").replace("-", "_")
    return click.option(old, name, cls=Renamed, target=to, **attrs)


# The command line's vocabulary, what each option name means once for every `lab` command, is
# lab/cli/common/vocabulary.toml (why, there); tests/test_cli_options.py holds every command to it.
MEANINGS: dict[str, tuple[str, str]] = {
    option: (users, meaning)
    for option, (users, meaning) in tomllib.loads(
        (Path(__file__).parent / "vocabulary.toml").read_text()
    )["meanings"].items()
}
