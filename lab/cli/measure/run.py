"""`lab run`: plan a sweep from the scenario and the options, run it with progress, summarise it."""

from __future__ import annotations

import contextlib
import sys
from typing import Any

import click
import cloup
from rich.markup import escape

from lab.backends import dbrun
from lab.backends.base import Backend, CpuLayout, NativeBackend
from lab.backends.databases import url_kind
from lab.cli.common.options import console, ensure_writable
from lab.cli.common.stopping import clean_leftovers, exit_when_stopped, stop_signals
from lab.cli.measure.app import check_user_app
from lab.cli.measure.resume import decode_invocation, encode_invocation, resumed_run
from lab.cli.measure.run_options import APP_ONLY, SCENARIO_OPTIONS, run_options
from lab.config import availability
from lab.config.models import Knobs, Model, Registry, alias_notes, knob_notes, load_registry
from lab.config.scenario import Scenario, load_scenario, override
from lab.front.nginx import Front, variants
from lab.front.serve import FrontedBackend
from lab.record.errors import EXIT_NO_ANSWER, LabError
from lab.record.step import StepRecord
from lab.run import generators
from lab.run.plan import Plan, plan_run, resolve_knobs
from lab.run.progress import ConsoleProgress
from lab.run.sweep import Sweep
from lab.system import safety
from lab.verdict.power import smallest_seen


@cloup.command("run")
@run_options
@click.pass_context
def run(ctx: click.Context, /, **_: Any) -> None:
    """Sweep load levels (users, or arrival rates in open loop) for each model and write
    results/<run-id>/."""
    opts = dict(ctx.params)
    recorded = resumed_run(ctx) if opts["resume"] else None
    if recorded is not None:
        opts.update(decode_invocation(recorded.get("invocation", {})))
    if opts["allow_remote"]:
        console.print(f"[bold white on red] WARNING [/] {safety.REMOTE_WARNING}")
    clean_leftovers(opts["resume"].parent if opts["resume"] else opts["out"])
    registry = load_registry(opts["models_file"])
    scenario = scenario_from(opts)
    given = [f"--{o}" for o, k in APP_ONLY.items() if opts[k]] + ["[env]"] * bool(scenario.env)
    if not opts["app_target"] and given:
        raise LabError(f"{', '.join(given)}: only with --app MODULE:ATTR (your own app)")
    front, fleet = check_inputs(opts, scenario)
    checked = check_user_app(opts, registry, scenario) if opts["app_target"] else None
    if checked is None and opts["app_target"]:
        return  # --check-only
    if checked is not None:
        scenario, chosen = checked.scenario, list(checked.models)
    else:
        chosen = models_to_run(opts, registry, scenario)
    chosen = variants(chosen, front.names) if front else chosen
    check_before_start(opts, scenario, chosen, registry.knobs)
    plan = plan_run(
        scenario,
        chosen,
        registry.knobs,
        opts["out"],
        command_line_knobs=opts["knobs"],
        run_dir=opts["resume"],
        new_run=checked.run if checked else None,
        preflights=checked.preflights if checked else {},
        allow_remote=opts["allow_remote"],
        limits=scenario.check_open_files(),
        invocation=encode_invocation(opts),
        generators=fleet,
    )
    backend = make_backend(opts["backend"], plan, scenario, front)
    verb = "resuming" if recorded else "run"
    console.print(
        f"{verb} [bold]{plan.run_id}[/] → {plan.run_dir}  (about "
        f"{plan.expected_seconds() / 60:.0f} min)"
    )
    databases = dbrun.serving(
        scenario.route,
        plan.run_dir,
        opts["db_urls"],
        opts["db_driver"],
        opts["allow_remote"],
        scenario.host,
        scenario.app.env if scenario.app else (),
        data=checked.data if checked else None,  # the app's schema and seed, again
        fast=opts["db_durability"] == "fast",
        cores=CpuLayout.split(scenario.pin_cpus).server,  # the system under test's cores
    )
    sweep_and_summarise(plan, backend, recorded, databases)


def check_inputs(
    opts: dict[str, Any], scenario: Scenario
) -> tuple[Front | None, generators.Generators]:
    """The inputs not checked yet, before --app's check starts servers and writes its run
    directory, and before any run directory is made: bad input exits 2 with nothing behind.
    Returns the front and the generators they ask for."""
    front = Front.of(opts["front"], opts["front_knobs"], opts["backend"])
    fleet = _generators(opts, scenario)
    if dbrun.needed(scenario.route) and opts["backend"] != "native":
        raise LabError(f"--route {scenario.route}: needs --backend native (databases run locally)")
    for url in opts["db_urls"]:  # each is pinged when the run starts (refused: exit 3)
        url_kind(url, opts["allow_remote"])
    return front, fleet


def _generators(opts: dict[str, Any], scenario: Scenario) -> generators.Generators:
    cap = scenario.max_outstanding if scenario.mode == "open" else None
    return generators.choose(
        opts["generators"], opts["remote_generators"], opts["master"], opts["allow_remote"], cap
    )


def sweep_and_summarise(
    plan: Plan,
    backend: Backend,
    recorded: dict[str, Any] | None,
    databases: contextlib.AbstractContextManager[object],
) -> None:
    """Run the sweep with progress; on Ctrl-C or SIGTERM say what was kept and exit non-zero."""
    with (
        exit_when_stopped(plan.run_dir, "lab run"),
        stop_signals(),
        databases,
        ConsoleProgress(console, plan.expected_seconds()) as progress,
    ):
        Sweep(plan, backend, progress, resume=recorded).run()
    from analysis.loading import RunError, load  # pandas: imported only when there is a run to show
    from analysis.summary import print_summary

    try:
        print_summary(load(plan.run_dir))
    except RunError as e:  # e.g. the upstream never started: nothing was measured
        console.print(f"[red]nothing to summarise:[/] {escape(str(e))}")
        sys.exit(EXIT_NO_ANSWER)
    console.print(smallest_seen(plan.run.standing()), markup=False)
    console.print(f"done: {plan.run_dir}  (next: lab report {plan.run_dir})", markup=False)
    if why := no_answer(plan.run.standing()):
        console.print(f"[red]no answer:[/] {why} (its flags in steps.jsonl say why)")
        sys.exit(EXIT_NO_ANSWER)


UNANSWERED = ("no_responses", "upstream_down")  # the step measured nothing of the model


def no_answer(steps: list[StepRecord]) -> str:
    """Why a run has no answer ("" when it has one): no step measured the model, each was
    skipped, answered nothing or lost its upstream. Such a run exits 1, not 0: a script or a CI
    job must not read a run that measured nothing as a result."""
    if any(s.status != "skipped" and not set(UNANSWERED) & set(s.evidence.flags) for s in steps):
        return ""
    if all(s.status == "skipped" for s in steps):
        return "no model ran: every step was skipped"
    return "no step measured an answer: each was skipped, answered nothing or lost its upstream"


def check_before_start(
    opts: dict[str, Any], scenario: Scenario, chosen: list[Model], defaults: Knobs
) -> None:
    """What can be refused before a directory is made or a process started: each model's knob
    limits (raised minimums are reported) and a writable --out."""
    knobs = resolve_knobs(defaults, scenario, opts["knobs"])
    for note in alias_notes({**scenario.knobs, **opts["knobs"]}):
        console.print(f"[yellow]note:[/] {escape(note)}")
    for note in knob_notes(chosen, knobs):
        console.print(f"[yellow]knob adjusted:[/] {escape(note)}")
    if not opts["resume"]:
        ensure_writable(opts["out"], "--out")


# options one loop alone reads: given to a run of the other, they were once ignored in silence
ONLY = {"open": ("rates", "max_outstanding", "arrival"), "closed": ("levels",)}


def scenario_from(opts: dict[str, Any]) -> Scenario:
    """The scenario file with the command line's overrides, its host checked; an error names
    the option typed (`--port`), not the scenario's key (`server_port`)."""
    typed = {f: option_name(o) for o, f in SCENARIO_OPTIONS.items() if opts[o] is not None}
    scenario = override(
        load_scenario(opts["scenario_name"]),
        said={**typed, "routes": "--upstream-route"},  # a scenario file's own: checked at load
        **{field: opts[option] for option, field in SCENARIO_OPTIONS.items()},
        pin_cpus=False if opts["no_pin"] else None,
        routes=tuple(opts.get("upstream_routes") or ()) or None,  # the upstream's, if given
    )
    safety.check_host(scenario.host, "--host", allow_remote=opts["allow_remote"])
    for mode, params in ONLY.items():
        ignored = [option_name(o) for o in params if opts[o] is not None]
        if scenario.mode != mode and ignored:
            fix = "add --mode open" if mode == "open" else "drop it (--rates are the steps)"
            raise LabError(
                f"{', '.join(ignored)}: {mode} loop only, and this run is {scenario.mode} loop "
                f"(the {scenario.name} scenario's, or --mode): {fix}"
            )
    return scenario


def option_name(param: str) -> str:
    """A `lab run` parameter as the user types it: `max_outstanding` is `--max-outstanding`."""
    return "--" + param.replace("_", "-")


def models_to_run(opts: dict[str, Any], registry: Registry, scenario: Scenario) -> list[Model]:
    """The scenario's models, each under its interpreter; on the native backend, the installed
    ones (the others are skipped with the reason)."""
    chosen = availability.with_python(registry.pick(list(scenario.models)), opts["python"])
    if opts["backend"] == "native":  # the docker backend runs the image's own servers
        return availability.usable(chosen, lambda line: console.print(f"[yellow]{line}[/]"))
    if any(m.python for m in chosen):
        raise LabError("--python and a model's python field work with --backend native only")
    return chosen


def make_backend(name: str, plan: Plan, scenario: Scenario, front: Front | None = None) -> Backend:
    layout = CpuLayout.split(scenario.pin_cpus)
    if name == "docker":
        from lab.backends.containers import DockerBackend  # needs the Docker SDK and an engine

        return DockerBackend(plan.run_id, layout, ready_timeout_s=scenario.start_timeout_s)
    backend = NativeBackend(
        plan.run_dir,
        layout,
        host=scenario.host,
        ready_timeout_s=scenario.start_timeout_s,
        interpreters=availability.describe(list(plan.models)),
    )
    backend.ready_path = scenario.health_path
    if front is not None and front.binary:
        return FrontedBackend(backend, front.knobs, front.binary)
    return backend
