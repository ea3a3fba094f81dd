"""The options of `lab run`: what each overrides in the scenario, which need --app, which
a resumed run reuses."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from lab.cli.appmix import TRAFFIC_OPTIONS
from lab.cli.options import (
    DB_OPTIONS,
    ENGINE,
    LOGIN_ONLY,
    LOGIN_OPTIONS,
    UPSTREAM_ROUTE,
    from_scenario,
    int_list,
    knob_pairs,
    name_list,
    positive,
    rate_list,
    results_dir_option,
    resume_option,
)
from lab.config import appenv
from lab.config.scenario import ROUTES, builtin_names, load_scenario

# `lab run` option -> the scenario field it overrides (None: keep the scenario's value).
SCENARIO_OPTIONS = {
    **{name: name for name in ("models", "levels", "trials", "delay_ms", "route", "host")},
    **{name: name for name in ("mode", "rates", "max_outstanding", "arrival", "upstream_port")},
    "engine": "engine",
    "duration": "duration_s",
    "warmup": "warmup_s",
    "port": "server_port",
    "request_timeout": "request_timeout_s",
    "start_timeout": "start_timeout_s",
}


APP_ONLY = {  # option -> its parameter: meaningful with --app only
    "app-dir": "app_dir",
    "path": "app_paths",
    "probe-path": "probe_path",
    "body": "app_body",
    "header": "app_headers",
    "check-only": "check_only",
    "env": "app_env",
    "compare": "compare",
    "import-timeout": "import_timeout",
    "access-log": "access_log",
    "log-top": "log_top",
    "log-methods": "log_methods",
    "mix": "mix_file",
    "har": "har",
    "har-host": "har_host",
    "har-keep": "har_keep",
    "db-setup": "db_setup",
    "db-seed": "db_seed",
    **LOGIN_ONLY,
}


# The options that define what a run measures: recorded in the manifest, reused by --resume.
RESUMABLE = (
    "scenario_name",
    "models",
    "levels",
    "duration",
    "warmup",
    "trials",
    "delay_ms",
    "route",
    *("knobs", "port", "upstream_port", "no_pin"),
    "models_file",
    "host",
    "request_timeout",
    "start_timeout",
    *("mode", "rates", "max_outstanding", "arrival", "engine"),
    "backend",
    "db_driver",
    "python",
    "generators",
    "remote_generators",
    "master",
    "front",
    "front_knobs",
    "upstream_routes",
    "db_durability",
    *APP_ONLY.values(),  # an --app run resumes with its app, checked again first
    "app_target",
    "db_urls",
)


QUICK = load_scenario("quick")  # the default scenario of `lab run`, the base of `lab advise`


# Options `lab advise` shares with `lab run` (declared once; click makes a fresh option per use).
MODELS = click.option(
    "--models",
    callback=name_list,
    help="Comma-separated models (see `lab models`) "
    f"[default: the scenario's; quick: its {len(QUICK.models)}].",
)
DURATION = click.option(
    "--duration",
    type=float,
    callback=positive,
    help=f"Seconds measured per level {from_scenario(QUICK.duration_s)}.",
)
WARMUP = click.option(
    "--warmup",
    type=float,
    help=f"Seconds of discarded warm-up per model (0 = none) {from_scenario(QUICK.warmup_s)}.",
)
DELAY_MS = click.option(
    "--delay-ms",
    type=float,
    help=f"Mean upstream delay in milliseconds {from_scenario(QUICK.upstream.delay_ms)}.",
)
MODELS_FILE = click.option(
    "--models-file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="A TOML file of extra models (same shape as servers/models.toml) "
    "[default: none: servers/models.toml alone].",
)
APP_OPTIONS = (  # --app and what goes with it
    click.option(
        "--app",
        "app_target",
        metavar="MODULE:ATTR",
        help="Your own WSGI or ASGI app, e.g. myapp.web:app, or its factory with literal "
        "arguments, e.g. 'myapp:create_app()' (called once in each server process): checked "
        "under every model that can serve it (answers compared, concurrency probed), then "
        "swept on its load route or its traffic mix (weighted --path, or --access-log) "
        "[default: none: the lab's own app].",
    ),
    click.option(
        "--app-dir",
        type=click.Path(file_okay=False, path_type=Path),
        help="Directory to import --app from; the import check and every server run in it"
        " [default: the current directory].",
    ),
    *TRAFFIC_OPTIONS,
    click.option(
        "--body",
        "app_body",
        metavar="TEXT",
        help="With --app: the body sent with every route whose method is not GET, "
        "e.g. '{\"n\": 1}' [default: none: an empty body].",
    ),
    click.option(
        "--header",
        "app_headers",
        multiple=True,
        metavar="'NAME: VALUE'",
        help="With --app: a header sent with every request (repeatable), "
        "e.g. 'Authorization: ...'.",
    ),
    click.option(
        "--env",
        "app_env",
        multiple=True,
        metavar="NAME=VALUE",
        help="With --app: a variable of the app's environment, in the import check, the check, "
        "the probe and every server (repeatable; wins over a scenario's [env]), e.g. "
        "DJANGO_SETTINGS_MODULE=mysite.settings. Placeholders name what the lab runs: "
        f"{appenv.words()}.",
    ),
    click.option(
        "--compare",
        type=click.Choice(["shape", "exact"]),
        help="With --app: how bodies must match across models: shape (JSON keys and value "
        "types; other text, what stays the same when one model answers a route twice) or "
        "exact (byte for byte, the server's own address aside) [default: shape].",
    ),
    click.option(
        "--import-timeout",
        type=float,
        callback=positive,
        help="With --app: seconds importing the app may take [default: 60]; a server's start-up "
        "is bounded by --start-timeout.",
    ),
    *LOGIN_OPTIONS,
)


GENERATOR_OPTIONS = (  # `lab run` and `lab advise`: where the load comes from
    click.option(
        "--generators",
        type=click.IntRange(min=0),
        help="Load-generator processes per step (locust workers under one master), each pinned to "
        "its own core [default: automatic: closed loop, the client half's cores minus one (1 on "
        "2 cores); open loop, as many as each rate needs, at most those].",
    ),
    click.option(
        "--remote-generators",
        type=click.IntRange(min=0),
        default=0,
        show_default=True,
        help="Also wait for this many load-generator processes started elsewhere with "
        "`lab generator --connect`.",
    ),
    click.option(
        "--master",
        metavar="HOST:PORT",
        help="Where the generator master listens for its workers [default: 127.0.0.1, any port; "
        "127.0.0.1:5557 with --remote-generators]; non-loopback needs --allow-remote.",
    ),
)


FRONT_OPTIONS = (  # `lab run`, `lab advise` and `lab ui`: nginx in front of each model
    click.option(
        "--front",
        metavar="bare|nginx|bare,nginx",
        help="Put each model behind nginx, configured as its server's docs recommend (uWSGI "
        "over uwsgi_pass on a unix socket; the others over proxy_pass, HTTP/1.1, keepalive "
        "pool); bare,nginx runs both side by side as NAME and NAME+nginx [default: bare].",
    ),
    click.option(
        "--front-knob",
        "front_knobs",
        multiple=True,
        callback=knob_pairs,
        metavar="NAME=VALUE",
        help="An nginx knob (repeatable): workers=1, connections=4096 (per worker), "
        "keepalive=256 (idle server connections per worker), buffering=on, "
        "client_keepalive_s=75.",
    ),
)


# Every option of `lab run`, in the order `--help` lists them.
RUN_OPTIONS: tuple[Callable[[Callable[..., Any]], Callable[..., Any]], ...] = (
    click.option(
        "--scenario",
        "scenario_name",
        default="quick",
        show_default=True,
        help=f"Built-in scenario ({', '.join(builtin_names())}) or path to a TOML file.",
    ),
    MODELS,
    click.option(
        "--levels",
        callback=int_list,
        help=f"Closed loop: numbers of users, e.g. 1,10,100 {from_scenario(QUICK.levels)}.",
    ),
    click.option(
        "--mode",
        type=click.Choice(["closed", "open"]),
        help="closed: N users, no think time; open: requests arrive at fixed --rates "
        f"{from_scenario(QUICK.mode)}.",
    ),
    click.option(
        "--rates",
        callback=rate_list,
        help="Open loop: comma-separated arrival rates (req/s) [default: the scenario's].",
    ),
    click.option(
        "--max-outstanding",
        type=int,
        callback=positive,
        help="Open loop: cap on requests in flight; the rest count as dropped "
        f"{from_scenario(QUICK.max_outstanding)}.",
    ),
    click.option(
        "--arrival",
        type=click.Choice(["constant", "poisson"]),
        help=f"Open loop: how arrivals are spaced {from_scenario(QUICK.arrival)}.",
    ),
    ENGINE,
    DURATION,
    WARMUP,
    click.option(
        "--trials",
        type=int,
        callback=positive,
        help=f"Repeats of every level, interleaved across models {from_scenario(QUICK.trials)}.",
    ),
    DELAY_MS,
    UPSTREAM_ROUTE,
    click.option(
        "--route",
        type=click.Choice(list(ROUTES)),
        help="What each request does; db and cache wait in PostgreSQL and Redis "
        f"(started for the run) {from_scenario(QUICK.route)}.",
    ),
    *DB_OPTIONS,
    click.option(
        "--knob",
        "knobs",
        multiple=True,
        callback=knob_pairs,
        metavar="NAME=VALUE",
        help="Override a server knob for this run (repeatable): --knob concurrency=50 (threads, "
        "greenlets or coroutines per process), --knob processes=2 (server processes).",
    ),
    click.option("--port", type=int, help="Server port [default: any free port]."),
    click.option("--upstream-port", type=int, help="Upstream port [default: any free port]."),
    click.option("--no-pin", is_flag=True, help="Do not pin server and load generator to cores."),
    click.option(
        "--python",
        type=click.Path(dir_okay=False, exists=True),
        help="Run every model under this interpreter, in a venv the lab makes and caches "
        "(e.g. a free-threaded python3.14t) [default: the lab's own .venv].",
    ),
    results_dir_option("Directory that receives the run directory."),
    MODELS_FILE,
    click.option(
        "--host",
        help="Address every listener binds and the load targets "
        "[default: 127.0.0.1]; non-loopback needs --allow-remote.",
    ),
    click.option(
        "--request-timeout",
        type=float,
        callback=positive,
        help="Seconds before a request counts as a timeout "
        f"{from_scenario(QUICK.request_timeout_s)}.",
    ),
    click.option(
        "--start-timeout",
        type=float,
        callback=positive,
        help="Seconds a server gets to answer /health, else start_failed "
        f"{from_scenario(QUICK.start_timeout_s)}.",
    ),
    resume_option("Continue the run in this directory, skipping its completed steps."),
    click.option(
        "--allow-remote",
        is_flag=True,
        help="Allow non-loopback listeners and targets. Only for hosts you own.",
    ),
    click.option(
        "--backend",
        type=click.Choice(["native", "docker"]),
        default="native",
        show_default=True,
        help="native: servers as local processes; docker: each in its own container "
        "(image from docker/build-image.sh, limits from tuning/).",
    ),
    *APP_OPTIONS,
    click.option(
        "--check-only",
        is_flag=True,
        help="With --app: check and probe the app under every model, then stop (no sweep).",
    ),
    *GENERATOR_OPTIONS,
    *FRONT_OPTIONS,
)


def run_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Declare every `lab run` option on `command` (click applies decorators bottom-up)."""
    for option in reversed(RUN_OPTIONS):
        command = option(command)
    return command
