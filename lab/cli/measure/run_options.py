"""The options of `lab run`: what each overrides in the scenario, which need --app, which
a resumed run reuses."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click
import cloup

from lab.cli.common.options import (
    DB_OPTIONS,
    ENGINE,
    LOGIN_ONLY,
    LOGIN_OPTIONS,
    UPSTREAM_ROUTE,
    Decorator,
    choice_option,
    count_option,
    file_option,
    from_scenario,
    int_list,
    knob_pairs,
    name_list,
    positive,
    rate_list,
    results_dir_option,
    resume_option,
    shown,
)
from lab.cli.measure.appmix import APP_CORE, TRAFFIC_OPTIONS
from lab.config.scenario import PROFILES, ROUTES, builtin_names, load_scenario

# `lab run` option -> the scenario field it overrides (None: keep the scenario's value).
SCENARIO_OPTIONS = {
    **{name: name for name in ("models", "levels", "trials", "delay_ms", "route", "host")},
    **{name: name for name in ("mode", "rates", "max_outstanding", "arrival", "upstream_port")},
    "engine": "engine",
    "profile": "profile",
    "remeasure": "remeasure",
    "order_seed": "order_seed",
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
    "app-requirements": "app_requirements",
    "app-venv": "app_venv",
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
    "remeasure",
    "order_seed",
    "delay_ms",
    "route",
    *("knobs", "port", "upstream_port", "no_pin"),
    "models_file",
    "host",
    "request_timeout",
    "start_timeout",
    *("mode", "rates", "max_outstanding", "arrival", "engine", "profile"),
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


def scenario_options(command: str) -> tuple[Decorator, Decorator, Decorator, Decorator]:
    """--models, --delay-ms, --duration, --warmup, which `lab advise` shares with `lab run`
    (declared once; click makes a fresh option per use). Said per command: `lab run`'s defaults
    are its --scenario's and it measures levels; `lab advise` has no --scenario (its base is the
    quick one) and measures steps, one per candidate configuration."""
    own = command == "run"
    per = "level" if own else "step (one per configuration tried)"
    models = f"the scenario's; quick: its {len(QUICK.models)}" if own else "the quick scenario's"
    return (
        click.option(
            "--models",
            callback=name_list,
            help=f"Comma-separated models (see `lab models`) [default: {models}].",
        ),
        click.option(
            "--delay-ms",
            type=float,
            help="Mean upstream delay in milliseconds "
            f"{from_scenario(QUICK.upstream.delay_ms, own)}.",
        ),
        click.option(
            "--duration",
            type=float,
            callback=positive,
            help=f"Seconds measured per {per} {from_scenario(QUICK.duration_s, own)}.",
        ),
        click.option(
            "--warmup",
            type=float,
            help="Seconds of discarded warm-up per model (0 = none) "
            f"{from_scenario(QUICK.warmup_s, own)}.",
        ),
    )


MODELS, DELAY_MS, DURATION, WARMUP = scenario_options("run")
MODELS_FILE = file_option(
    "--models-file",
    help="A TOML file of extra models (same shape as servers/models.toml) "
    "[default: none: servers/models.toml alone].",
)


GENERATOR_OPTIONS = (  # `lab run` and `lab advise`: where the load comes from
    click.option(
        "--generators",
        type=click.IntRange(min=0),
        help="Load-generator processes per step (locust workers under one master), each pinned to "
        "its own core [default: automatic: closed loop, the client half's cores minus one (1 on "
        "2 cores); open loop, as many as each rate needs, at most those].",
    ),
    count_option(
        "--remote-generators",
        least=0,
        default=0,
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


SCENARIO = shown(
    "--scenario",
    "scenario_name",
    default="quick",
    help=f"Built-in scenario ({', '.join(builtin_names())}) or path to a TOML file.",
)
LOAD_OPTIONS = (  # how much load, for how long, how often
    SCENARIO,
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
    click.option(
        "--remeasure",
        type=click.FloatRange(0, 10),
        metavar="SHARE",
        help="Steps the lab's own apparatus or a busy machine kept from a result are measured "
        "again after the trials, within this share of the trials' time; 0: never "
        f"{from_scenario(QUICK.remeasure)}.",
    ),
    click.option(
        "--order-seed",
        type=click.IntRange(0, 2**32 - 1),
        metavar="N",
        help="Seed of the models' shuffled order in each trial (kept in the manifest) "
        "[default: a new one per run].",
    ),
    click.option(
        "--request-timeout",
        type=float,
        callback=positive,
        help="Seconds before a request counts as a timeout "
        f"{from_scenario(QUICK.request_timeout_s)}.",
    ),
)
SERVER_OPTIONS = (  # the models and how each server is run
    MODELS,
    MODELS_FILE,
    click.option(
        "--knob",
        "knobs",
        multiple=True,
        callback=knob_pairs,
        metavar="NAME=VALUE",
        help="Override a server knob for this run (repeatable): --knob concurrency=50 (threads, "
        "greenlets or coroutines per process), --knob processes=2 (server processes).",
    ),
    *FRONT_OPTIONS,
    choice_option(
        "--backend",
        choices=("native", "docker"),
        default="native",
        help="native: servers as local processes; docker: each in its own container "
        "(image from docker/build-image.sh, limits from tuning/).",
    ),
    click.option(
        "--python",
        type=click.Path(dir_okay=False, exists=True),
        help="Run every model under this interpreter, in a venv the lab makes and caches "
        "(e.g. a free-threaded python3.14t) [default: the lab's own .venv].",
    ),
    click.option("--port", type=int, help="Server port [default: any free port]."),
    click.option("--no-pin", is_flag=True, help="Do not pin server and load generator to cores."),
    click.option(
        "--start-timeout",
        type=float,
        callback=positive,
        help="Seconds a server gets to answer /health, else start_failed "
        f"{from_scenario(QUICK.start_timeout_s)}.",
    ),
)
OWN_APP_OPTIONS = (  # the lab's own app (no --app): what each request does upstream
    DELAY_MS,
    UPSTREAM_ROUTE,
    click.option(
        "--route",
        type=click.Choice(list(ROUTES)),
        help="What each request does; db and cache wait in PostgreSQL and Redis "
        f"(started for the run) {from_scenario(QUICK.route)}.",
    ),
    click.option("--upstream-port", type=int, help="Upstream port [default: any free port]."),
)
OUTPUT_OPTIONS = (  # where results go, and the rest
    results_dir_option("Directory that receives the run directory."),
    resume_option("Continue the run in this directory, skipping its completed steps."),
    click.option(
        "--profile",
        type=click.Choice(list(PROFILES)),
        help="py-spy samples the server's processes through each measured step; auto: every "
        "step keeps where its time went, and its stacks where the limit is the server's CPU or "
        "not found or a call blocked an event loop; all: every step's stacks; off: no sampler "
        f"{from_scenario(QUICK.profile)}.",
    ),
    click.option(
        "--host",
        help="Address every listener binds and the load targets "
        "[default: 127.0.0.1]; non-loopback needs --allow-remote.",
    ),
    click.option(
        "--allow-remote",
        is_flag=True,
        help="Allow non-loopback listeners and targets. Only for hosts you own.",
    ),
)
CHECK_ONLY = click.option(
    "--check-only",
    is_flag=True,
    help="With --app: check and probe the app under every model, then stop (no sweep).",
)

# Every option of `lab run`, in the groups `--help` lists them under (cloup's option groups):
# a newcomer's own app first, then the load, the servers, and the rest.
RUN_GROUPS: tuple[tuple[str, tuple[Decorator, ...]], ...] = (
    ("Your app (without --app: the lab's own)", (*APP_CORE, CHECK_ONLY)),
    ("Its traffic: routes, a mix file, an access log or a HAR", TRAFFIC_OPTIONS),
    ("Its login: a session per simulated user", LOGIN_OPTIONS),
    ("Its databases", DB_OPTIONS),
    ("Load", LOAD_OPTIONS),
    ("Servers", SERVER_OPTIONS),
    ("The lab's own app and its upstream", OWN_APP_OPTIONS),
    ("Load generators", GENERATOR_OPTIONS),
    ("Output and more", OUTPUT_OPTIONS),
)


def run_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Declare every `lab run` option on `command`, group by group (click and cloup apply
    decorators bottom-up)."""
    for title, options in reversed(RUN_GROUPS):
        command = cloup.option_group(title, *options)(command)
    return command
