"""`lab advise`: for a target load, the cheapest configuration per model that meets it, confirmed
by real open-loop steps in an ordinary run directory, and the model to pick."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from lab.advise.advice import Advice
from lab.advise.confirm import Advisor
from lab.advise.table import advice_table, details
from lab.advise.target import Slo
from lab.backends import dbrun
from lab.backends.base import CpuLayout
from lab.backends.dbdata import DataSpec
from lab.cli.common.options import (
    DB_OPTIONS,
    ENGINE,
    UPSTREAM_ROUTE,
    Decorator,
    console,
    ensure_writable,
    positive,
    renamed,
    results_dir_option,
    resume_option,
    share_option,
    shown,
)
from lab.cli.common.stopping import clean_leftovers, exit_when_stopped, stop_signals
from lab.cli.measure.app import check_user_app
from lab.cli.measure.appmix import APP_OPTIONS
from lab.cli.measure.resume import decode_invocation, encode_invocation, reopened, same_options
from lab.cli.measure.run import make_backend, models_to_run
from lab.cli.measure.run_options import (
    APP_ONLY,
    FRONT_OPTIONS,
    GENERATOR_OPTIONS,
    MODELS_FILE,
    scenario_options,
)
from lab.config.models import load_registry
from lab.config.scenario import Scenario, load_scenario, override
from lab.front.nginx import Front, variants
from lab.record.errors import LabError
from lab.run import generators
from lab.run.plan import plan_run
from lab.run.progress import ConsoleProgress

# What the search measures, recorded in the manifest and reused by --resume.
RESUMABLE = (
    *("rps", "p99_ms", "error_rate", "models", "models_file"),
    *("delay_ms", "duration", "warmup", "budget_min", "engine"),
    *("generators", "remote_generators", "master", "front", "front_knobs"),
    *("upstream_routes", "db_urls", "db_driver", "db_durability"),
)
ADVISE_MODELS, ADVISE_DELAY_MS, ADVISE_DURATION, ADVISE_WARMUP = scenario_options("advise")
BASE_SCENARIO = "quick"  # step durations, upstream and models unless the options say otherwise
# Each candidate sets processes and the pools: the base knobs start from the least of them, so no
# model's knob limits refuse the base before its search has sized anything.
BASE_KNOBS = {"processes": 1, "concurrency": 1}

ADVISE_OPTIONS: tuple[Decorator, ...] = (
    click.option(
        "--rps",
        type=float,
        callback=positive,
        help="Target arrival rate (req/s) [required, unless --resume DIR].",
    ),
    click.option(
        "--p99-ms",
        type=float,
        callback=positive,
        help="Target p99 latency (ms), open loop [required, unless --resume DIR].",
    ),
    share_option(
        "--max-error-rate",
        "error_rate",
        help="Largest share of failed requests a configuration may have (dropped and unanswered "
        "ones count).",
    ),
    renamed("--error-rate", "error_rate"),  # now the upstream's injected 500s alone
    ADVISE_MODELS,
    MODELS_FILE,
    ADVISE_DELAY_MS,
    ENGINE,
    ADVISE_DURATION,
    ADVISE_WARMUP,
    shown(
        "--budget-min",
        type=float,
        callback=positive,
        default=10.0,
        help="Minutes the whole search may take; each model gets an equal share of what is left.",
    ),
    results_dir_option("Directory that receives the run directory."),
    click.option("--json", "as_json", is_flag=True, help="Print the advice as JSON on stdout."),
    resume_option("Continue the advise run in this directory, reusing the steps it measured."),
    *APP_OPTIONS,
    *GENERATOR_OPTIONS,
    *FRONT_OPTIONS,
    click.option(
        "--allow-remote",
        is_flag=True,
        help="Allow a --master that is not on loopback, for generators on other machines "
        "(the servers advised for stay on loopback), and, with --app, a --db-url or app "
        "connections that are not on loopback. Only for machines you own.",
    ),
    UPSTREAM_ROUTE,
    *DB_OPTIONS,
)


def advise_options(command: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed(ADVISE_OPTIONS):
        command = option(command)
    return command


@click.command("advise")
@advise_options
@click.pass_context
def advise(ctx: click.Context, /, **_: Any) -> None:
    """Find, per model, the cheapest configuration that serves --rps with p99 under --p99-ms,
    confirmed by open-loop steps, and recommend the cheapest that runs your app unchanged (an
    async port is shown beside it, labelled, never instead); exit 4 when a model that runs your
    app as it is was not confirmed because the lab's own generators were the limit (before 5),
    5 when only an async port meets the target, 1 when no model does. A step meets the target
    unless its throughput falls short of --rps or its p99 exceeds --p99-ms beyond noise (the
    sweep's test of a tie), its failures exceed --max-error-rate, or a flag disowns it."""
    opts = dict(ctx.params)
    recorded = resumed_advice(ctx) if opts["resume"] else None
    if recorded is not None:
        opts.update(decode_invocation(recorded["invocation"], RESUMABLE))
    if opts["rps"] is None or opts["p99_ms"] is None:
        raise click.UsageError("--rps and --p99-ms are required (or --resume DIR)")
    if not opts["app_target"] and (given := [f"--{o}" for o, k in APP_ONLY.items() if opts.get(k)]):
        raise LabError(f"{', '.join(given)}: only with --app MODULE:ATTR (your own app)")
    clean_leftovers(opts["resume"].parent if opts["resume"] else opts["out"])
    slo = Slo(opts["rps"], opts["p99_ms"], opts["error_rate"])
    advice = search(opts, slo, recorded)
    show(advice, opts["as_json"])
    sys.exit(advice.exit_code())


def search(opts: dict[str, Any], slo: Slo, recorded: dict[str, Any] | None) -> Advice:
    """Plan the advise run (checking --app first), search every model with the live progress
    display; Ctrl-C keeps every step measured and says how to resume."""
    front = Front.of(opts["front"], opts["front_knobs"], "native")
    fleet = generators.choose(  # checked before --app's check starts anything
        opts["generators"], opts["remote_generators"], opts["master"], opts["allow_remote"]
    )
    registry = load_registry(opts["models_file"])
    scenario = advise_scenario(opts)
    fixed: dict[str, Any] = {
        "backend": "native",
        "python": None,
        "knobs": {},
        "allow_remote": False,
    }
    app_opts = {**opts, **fixed, "allow_remote": opts["allow_remote"], "check_only": False}
    tables = console if opts["as_json"] else None  # stdout holds the advice's JSON alone
    checked = check_user_app(app_opts, registry, scenario, tables) if opts["app_target"] else None
    if checked is not None:
        scenario, chosen = checked.scenario, list(checked.models)
    else:
        chosen = models_to_run({**opts, **fixed}, registry, scenario)
    chosen = variants(chosen, front.names) if front else chosen
    if not opts["resume"]:
        ensure_writable(opts["out"], "--out")
    plan = plan_run(
        scenario,
        chosen,
        registry.knobs,
        opts["out"],
        command_line_knobs=BASE_KNOBS,
        run_dir=opts["resume"],
        new_run=checked.run if checked else None,
        preflights=checked.preflights if checked else {},
        limits=scenario.check_open_files(),
        invocation=encode_invocation(opts, RESUMABLE),
        generators=fleet,
    )
    backend = make_backend("native", plan, scenario, front)
    budget_s = opts["budget_min"] * 60
    console.print(
        f"advise [bold]{plan.run_id}[/] → {plan.run_dir}: {slo.words}, {len(chosen)} model(s), "
        f"at most {opts['budget_min']:g} min"
    )
    expected = min(budget_s, 1.5 * plan.expected_seconds())
    with (
        exit_when_stopped(plan.run_dir, "lab advise"),
        stop_signals(),
        _databases(opts, scenario, plan.run_dir, checked.data if checked else None),
        ConsoleProgress(console, expected) as progress,
    ):
        advisor = Advisor(plan, backend, progress, slo, budget_s, say, recorded)
        advisor.run()
    return advisor.result(complete=True)


def _databases(
    opts: dict[str, Any], scenario: Scenario, run_dir: Path, data: DataSpec | None
) -> AbstractContextManager[dict[str, str]]:
    """The databases the app's --env names, its schema and seed again (as the check made them),
    on the server's cores: they are part of the system under test."""
    env = scenario.app.env if scenario.app else ()
    dbs = (opts["db_urls"], opts["db_driver"], opts["allow_remote"], scenario.host, env)
    cores = CpuLayout.split(scenario.pin_cpus).server
    return dbrun.serving("", run_dir, *dbs, data=data, fast=fast(opts), cores=cores)


def say(line: str) -> None:
    console.print(line, markup=False, highlight=False)


def advise_scenario(opts: dict[str, Any]) -> Scenario:
    """The base scenario, open loop at the target rate, with the command line's overrides."""
    typed = {"rates": "--rps", "delay_ms": "--delay-ms", "duration_s": "--duration"}
    return override(
        load_scenario(BASE_SCENARIO),
        said={**typed, "warmup_s": "--warmup", "models": "--models", "routes": "--upstream-route"},
        name="advise",
        description=f"lab advise: {opts['rps']:g} req/s with p99 <= {opts['p99_ms']:g} ms",
        mode="open",
        rates=(opts["rps"],),
        models=opts["models"],
        delay_ms=opts["delay_ms"],
        duration_s=opts["duration"],
        warmup_s=opts["warmup"],
        routes=tuple(opts.get("upstream_routes") or ()) or None,
        engine=opts["engine"],
    )


def fast(opts: dict[str, Any]) -> bool:
    return opts.get("db_durability") == "fast"


def resumed_advice(ctx: click.Context) -> dict[str, Any]:
    """The manifest of the advise run to continue; options given again must be the recorded."""
    _, manifest = reopened(ctx.params["resume"])
    if "app" in manifest.get("scenario", {}):
        raise LabError(f"--resume {ctx.params['resume']}: an advise run of --app cannot be resumed")
    if "advise" not in manifest:
        raise LabError(f"--resume {ctx.params['resume']}: not a run of lab advise")
    same_options(ctx, manifest["invocation"], RESUMABLE)
    return manifest


def show(advice: Advice, as_json: bool) -> None:
    """The table and the details (on stderr with --json, whose object goes to stdout)."""
    out = Console(stderr=as_json, soft_wrap=True)
    out = out if out.is_terminal else Console(stderr=as_json, width=180)
    out.print(advice_table(advice))
    for line in details(advice):
        out.print(line, highlight=False)
    out.print(f"written: {Path(advice.run_dir) / 'advice.json'}", markup=False)
    if as_json:
        click.echo(json.dumps(advice.to_json(), indent=2))
