"""The `lab` command: run sweeps, list models, report on results."""

from __future__ import annotations

import contextlib
import json
import shlex
import signal
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from lab.backends import dbrun
from lab.backends.base import Backend, CpuLayout, NativeBackend
from lab.cli import generator as remote_generators
from lab.cli.doctor import doctor
from lab.cli.options import ensure_writable, results_dir_option
from lab.cli.report import compare_runs, report
from lab.cli.reproduce import reproduce
from lab.cli.serve import serve
from lab.cli.ui import ui
from lab.cli.upstream import upstream
from lab.config import availability, userapp
from lab.config.models import Knobs, Model, Registry, knob_notes, load_registry, parse_knobs
from lab.config.scenario import ROUTES, AppSpec, Scenario, builtin_names, load_scenario, override
from lab.record.errors import LabError, Refused
from lab.record.rundir import RunDir
from lab.run import appcheck, generators, leftovers
from lab.run.plan import Plan, plan_run, resolve_knobs
from lab.run.preflight import Preflight
from lab.run.progress import ConsoleProgress
from lab.run.sweep import Sweep
from lab.system import procs, safety
from servers.common import DB_DRIVERS

console = Console(stderr=True, soft_wrap=True)


def int_list(_: object, param: click.Parameter, value: str | None) -> tuple[int, ...] | None:
    if value is None:
        return None
    try:
        levels = tuple(int(v) for v in value.split(",") if v.strip())
    except ValueError:
        raise click.BadParameter(
            f"expected whole numbers separated by commas, got {value!r}"
        ) from None
    if not levels or any(v <= 0 for v in levels):
        raise click.BadParameter(f"every value must be a positive whole number, got {value!r}")
    return levels


def rate_list(_: object, __: click.Parameter, value: str | None) -> tuple[float, ...] | None:
    if value is None:
        return None
    try:
        rates = tuple(float(v) for v in value.split(",") if v.strip())
    except ValueError:
        raise click.BadParameter(f"expected numbers separated by commas, got {value!r}") from None
    if not rates or any(not 0 < v < float("inf") for v in rates):
        raise click.BadParameter(f"every rate must be a positive number, got {value!r}")
    return rates


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


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="concurrency-lab")
def main() -> None:
    """concurrency-lab: which Python server concurrency model should serve an I/O-bound Flask app?

    Start with `lab run` (the quick scenario, about 4 minutes), then `lab report results/<run>`.
    """


# `lab run` option -> the scenario field it overrides (None: keep the scenario's value).
SCENARIO_OPTIONS = {
    **{name: name for name in ("models", "levels", "trials", "delay_ms", "route", "host")},
    **{name: name for name in ("mode", "rates", "max_outstanding", "arrival", "upstream_port")},
    "duration": "duration_s",
    "warmup": "warmup_s",
    "port": "server_port",
    "request_timeout": "request_timeout_s",
    "start_timeout": "start_timeout_s",
}


@main.command()
@click.option(
    "--scenario",
    "scenario_name",
    default="quick",
    show_default=True,
    help=f"Built-in scenario ({', '.join(builtin_names())}) or path to a TOML file.",
)
@click.option("--models", callback=name_list, help="Comma-separated models (see `lab models`).")
@click.option(
    "--levels", callback=int_list, help="Comma-separated concurrency levels, e.g. 1,10,100."
)
@click.option(
    "--mode",
    type=click.Choice(["closed", "open"]),
    help="closed: N users, no think time (default); open: requests arrive at fixed --rates.",
)
@click.option(
    "--rates", callback=rate_list, help="Open loop: comma-separated arrival rates (req/s)."
)
@click.option(
    "--max-outstanding",
    type=int,
    callback=positive,
    help="Open loop: cap on requests in flight; the rest count as dropped [default: 500].",
)
@click.option("--arrival", type=click.Choice(["constant", "poisson"]), help="Open loop arrivals.")
@click.option("--duration", type=float, callback=positive, help="Seconds measured per level.")
@click.option("--warmup", type=float, help="Seconds of discarded warm-up per model (0 = none).")
@click.option("--trials", type=int, callback=positive, help="Repeats of every level.")
@click.option("--delay-ms", type=float, help="Mean upstream delay in milliseconds.")
@click.option(
    "--route",
    type=click.Choice(list(ROUTES)),
    help="What each request does; db and cache wait in PostgreSQL and Redis (started for the run).",
)
@click.option(
    "--db-url",
    "db_urls",
    multiple=True,
    metavar="URL",
    help="Your own database (postgresql://... or redis://...) instead of one the lab starts; "
    "loopback only unless --allow-remote.",
)
@click.option(
    "--db-driver",
    type=click.Choice(list(DB_DRIVERS)),
    help="PostgreSQL driver of the WSGI app's /db [default: psycopg2-green].",
)
@click.option(
    "--knob",
    "knobs",
    multiple=True,
    callback=knob_pairs,
    metavar="NAME=VALUE",
    help="Override a server knob for this run (repeatable), e.g. --knob workers=50.",
)
@click.option("--port", type=int, help="Server port (default: any free port).")
@click.option("--upstream-port", type=int, help="Upstream port (default: any free port).")
@click.option("--no-pin", is_flag=True, help="Do not pin server and load generator to cores.")
@click.option(
    "--python",
    type=click.Path(dir_okay=False, exists=True),
    help="Run every model under this interpreter, in a venv the lab makes and caches "
    "(e.g. a free-threaded python3.14t).",
)
@results_dir_option("Directory that receives the run directory.")
@click.option(
    "--models-file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="A TOML file of extra models (same shape as servers/models.toml).",
)
@click.option(
    "--host",
    help="Address every listener binds and the load targets "
    "[default: 127.0.0.1]; non-loopback needs --allow-remote.",
)
@click.option(
    "--request-timeout",
    type=float,
    callback=positive,
    help="Seconds before a request counts as a timeout [default: 30].",
)
@click.option(
    "--start-timeout",
    type=float,
    callback=positive,
    help="Seconds a server gets to answer /health, else start_failed [default: 30].",
)
@click.option(
    "--resume",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    help="Continue the run in this directory, skipping its completed steps.",
)
@click.option(
    "--allow-remote",
    is_flag=True,
    help="Allow non-loopback listeners and targets. Only for hosts you own.",
)
@click.option(
    "--backend",
    type=click.Choice(["native", "docker"]),
    default="native",
    show_default=True,
    help="native: servers as local processes; docker: each in its own container "
    "(image from docker/build-image.sh, limits from tuning/).",
)
@click.option(
    "--app",
    "app_target",
    metavar="MODULE:ATTR",
    help="Your own WSGI or ASGI app, e.g. myapp.web:app: checked under every model that can "
    "serve it (answers compared, concurrency probed), then swept on --probe-path.",
)
@click.option(
    "--app-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Directory to import --app from.",
)
@click.option(
    "--path",
    "app_paths",
    multiple=True,
    metavar="/ROUTE",
    help="A route of --app to request, /ROUTE or METHOD /ROUTE (repeatable; the first GET "
    "route also proves a server is up).",
)
@click.option(
    "--probe-path",
    metavar="/ROUTE",
    help="--app route to probe, then load in the sweep [default: last --path].",
)
@click.option(
    "--body",
    "app_body",
    metavar="TEXT",
    help="With --app: the body sent with every route whose method is not GET, e.g. '{\"n\": 1}'.",
)
@click.option(
    "--header",
    "app_headers",
    multiple=True,
    metavar="'NAME: VALUE'",
    help="With --app: a header sent with every request (repeatable), e.g. 'Authorization: ...'.",
)
@click.option(
    "--check-only",
    is_flag=True,
    help="With --app: check and probe the app under every model, then stop (no sweep).",
)
@click.option(
    "--generators",
    type=click.IntRange(min=0),
    help="Load-generator processes per step (locust workers under one master), each pinned to "
    "its own core [default: automatic, the client half's cores minus one; 1 on 2 cores].",
)
@click.option(
    "--remote-generators",
    type=click.IntRange(min=0),
    default=0,
    help="Also wait for this many workers started elsewhere with `lab generator --connect`.",
)
@click.option(
    "--master",
    metavar="HOST:PORT",
    help="Where the generator master listens for its workers [default: 127.0.0.1, any port; "
    "127.0.0.1:5557 with --remote-generators]; non-loopback needs --allow-remote.",
)
@click.pass_context
def run(ctx: click.Context, /, **_: Any) -> None:
    """Sweep concurrency levels for each model and write results/<run-id>/."""
    opts = dict(ctx.params)
    recorded = resumed_run(ctx) if opts["resume"] else None
    if recorded is not None:
        opts.update(decode_invocation(recorded.get("invocation", {})))
    if opts["allow_remote"]:
        console.print(f"[bold white on red] WARNING [/] {safety.REMOTE_WARNING}")
    clean_leftovers(opts["resume"].parent if opts["resume"] else opts["out"])
    registry = load_registry(opts["models_file"])
    scenario = scenario_from(opts)
    if not opts["app_target"] and (given := [f"--{o}" for o, k in APP_ONLY.items() if opts[k]]):
        raise LabError(f"{', '.join(given)}: only with --app MODULE:ATTR (your own app)")
    checked = check_user_app(opts, registry, scenario) if opts["app_target"] else None
    if checked is None and opts["app_target"]:
        return  # --check-only
    if checked is not None:
        scenario, chosen = checked.scenario, list(checked.models)
    else:
        chosen = models_to_run(opts, registry, scenario)
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
        generators=generators.choose(
            opts["generators"],
            opts["remote_generators"],
            opts["master"],
            scenario.mode,
            opts["allow_remote"],
        ),
    )
    if dbrun.needed(scenario.route) and opts["backend"] != "native":
        raise LabError(f"--route {scenario.route}: needs --backend native (databases run locally)")
    backend = make_backend(opts["backend"], plan, scenario)
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
    )
    sweep_and_summarise(plan, backend, recorded, databases)


def sweep_and_summarise(
    plan: Plan,
    backend: Backend,
    recorded: dict[str, Any] | None,
    databases: contextlib.AbstractContextManager[object],
) -> None:
    """Run the sweep with progress; on Ctrl-C or SIGTERM say what was kept and exit non-zero."""
    try:
        with (
            stop_signals(),
            databases,
            ConsoleProgress(console, plan.expected_seconds()) as progress,
        ):
            Sweep(plan, backend, progress, resume=recorded).run()
    except KeyboardInterrupt as e:
        late = procs.stop_all()  # normally none: the sweep stopped everything already
        console.print(
            f"[red]interrupted ({escape(str(e)) or 'SIGINT'})[/]: stopped every process it started"
            f"{' (late: ' + ', '.join(late) + ')' if late else ''}; finished steps are kept in "
            f"{escape(str(plan.run_dir))}; continue with: lab run --resume "
            f"{escape(str(plan.run_dir))}"
        )
        sys.exit(128 + (signal.Signals[str(e)] if str(e) in STOP_SIGNALS else signal.SIGINT))
    from analysis.loading import RunError, load  # pandas: imported only when there is a run to show
    from analysis.summary import print_summary

    try:
        print_summary(load(plan.run_dir))
    except RunError as e:  # e.g. the upstream never started: nothing was measured
        console.print(f"[red]nothing to summarise:[/] {escape(str(e))}")
    console.print(f"done: {plan.run_dir}  (next: lab report {plan.run_dir})", markup=False)


def check_before_start(
    opts: dict[str, Any], scenario: Scenario, chosen: list[Model], defaults: Knobs
) -> None:
    """What can be refused before a directory is made or a process started: each model's knob
    limits (raised minimums are reported) and a writable --out."""
    knobs = resolve_knobs(defaults, scenario, opts["knobs"])
    for note in knob_notes(chosen, knobs):
        console.print(f"[yellow]knob adjusted:[/] {escape(note)}")
    if not opts["resume"]:
        ensure_writable(opts["out"], "--out")


def scenario_from(opts: dict[str, Any]) -> Scenario:
    """The scenario file with the command line's overrides, its host checked."""
    scenario = override(
        load_scenario(opts["scenario_name"]),
        **{field: opts[option] for option, field in SCENARIO_OPTIONS.items()},
        pin_cpus=False if opts["no_pin"] else None,
    )
    safety.check_host(scenario.host, "--host", allow_remote=opts["allow_remote"])
    return scenario


def models_to_run(opts: dict[str, Any], registry: Registry, scenario: Scenario) -> list[Model]:
    """The scenario's models, each under its interpreter; on the native backend, the installed
    ones (the others are skipped with the reason)."""
    chosen = availability.with_python(registry.pick(list(scenario.models)), opts["python"])
    if opts["backend"] == "native":  # the docker backend runs the image's own servers
        return availability.usable(chosen, lambda line: console.print(f"[yellow]{line}[/]"))
    if any(m.python for m in chosen):
        raise LabError("--python and a model's python field work with --backend native only")
    return chosen


APP_ONLY = {  # option -> its parameter: meaningful with --app only
    "app-dir": "app_dir",
    "path": "app_paths",
    "probe-path": "probe_path",
    "body": "app_body",
    "header": "app_headers",
    "check-only": "check_only",
}


@dataclass(frozen=True)
class CheckedApp:
    """A user's app that passed `lab.run.appcheck`: what the sweep then loads, and its evidence."""

    scenario: Scenario  # route "app": the load path, d = the route's time alone
    models: tuple[Model, ...]  # each serving the user's app
    preflights: dict[str, Preflight]
    run: RunDir  # holds appcheck.json; the sweep continues in it


def check_user_app(
    opts: dict[str, Any], registry: Registry, scenario: Scenario
) -> CheckedApp | None:
    """`lab run --app`: verify and probe the user's app under every model that can serve it;
    refuse it if they differ or fail. None with --check-only, else what to sweep."""
    if not opts["app_paths"]:
        raise LabError("--app needs at least one --path /ROUTE")
    if opts["backend"] != "native" or opts["resume"]:
        raise LabError("--app runs with --backend native and cannot be resumed (run it again)")
    given = (opts["app_body"], opts["app_headers"])
    routes = userapp.parse_routes(opts["app_paths"], *given)
    probe = userapp.parse_routes((opts["probe_path"],), *given)[0] if opts["probe_path"] else None
    health = userapp.health_route(routes)
    app = userapp.inspect_app(opts["app_target"], opts["app_dir"])
    names = opts["models"] or [m.name for m in registry.models.values() if m.app == app.kind]
    models = registry.pick(list(names))
    for model in models:
        model.check_installed(registry.knobs.resolve(1))
    knobs = registry.knobs.updated(opts["knobs"], "--knob").resolve(scenario.max_connections)
    run = RunDir.create(opts["out"], "app")
    load = probe or routes[-1]
    with (
        stop_signals(),
        dbrun.serving("", run.path, opts["db_urls"], opts["db_driver"], opts["allow_remote"]),
    ):
        result = appcheck.run(app, models, knobs, routes, load, run.path)
    for table in appcheck.render(result):
        Console().print(table)
    console.print(f"written: {run.path / 'appcheck.json'}")
    if problems := result.problems():
        raise LabError(f"{app.target} cannot be compared fairly: {'; '.join(problems)}")
    if opts["check_only"]:
        return None
    labels = tuple(r.label for r in routes)
    spec = AppSpec(app.target, app.kind, labels, health.path, load.path, result.solo_ms())
    spec = replace(spec, method=load.method, body=load.body, headers=load.headers)
    fitted = tuple(f[0] for m in models if (f := userapp.fit(app, m)) is not None)
    checks = {m.model: m.preflight() for m in result.models}
    return CheckedApp(override(scenario, route="app", app=spec), fitted, checks, run)


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
    "knobs",
    "port",
    "upstream_port",
    "no_pin",
    "models_file",
    "host",
    "request_timeout",
    "start_timeout",
    "mode",
    "rates",
    "max_outstanding",
    "arrival",
    "backend",
    "db_driver",
    "python",
    "generators",
    "remote_generators",
    "master",
)


def make_backend(name: str, plan: Plan, scenario: Scenario) -> Backend:
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
    return backend


def encode_invocation(opts: dict[str, Any]) -> dict[str, Any]:
    encoded: dict[str, Any] = json.loads(json.dumps({k: opts[k] for k in RESUMABLE}, default=str))
    return encoded


def decode_invocation(recorded: dict[str, Any]) -> dict[str, Any]:
    opts = {k: v for k, v in recorded.items() if k in RESUMABLE}
    for key in ("models", "levels", "rates"):
        if opts.get(key) is not None:
            opts[key] = tuple(opts[key])
    if opts.get("models_file") is not None:
        opts["models_file"] = Path(opts["models_file"])
    return opts


def resumed_run(ctx: click.Context) -> dict[str, Any] | None:
    """The manifest of the run to resume; exits 0 (after saying so) if it is already complete.

    Options given again on the command line must match the recorded ones; the rest are taken
    from the manifest, so `lab run --resume DIR` alone continues the run as it was started.
    """
    run_dir: Path = ctx.params["resume"]
    try:
        run = RunDir.existing(run_dir)
        manifest = run.manifest()
        run.steps()  # refuse damaged files before anything is appended to them
        run.rows("preflight.jsonl")
    except LabError as e:
        raise LabError(f"--resume: {e}") from None
    if "app" in manifest.get("scenario", {}):
        raise LabError(f"--resume {run_dir}: a run of --app cannot be resumed; run it again")
    owner = procs.PidRecord.read(run_dir / "pids" / procs.OWNER_PID_FILE)
    if owner is not None and owner.is_running():
        raise Refused(f"--resume {run_dir}: a lab process (pid {owner.pid}) is still running it")
    if manifest.get("status") == "complete":
        console.print(f"{run_dir} is already complete; nothing to resume", markup=False)
        ctx.exit(0)
    if not isinstance(manifest.get("invocation"), dict):
        raise LabError(f"--resume {run_dir}: its manifest records no invocation to continue")
    warning = run.repair()
    if warning:
        console.print(f"[yellow]warning:[/] {warning}", markup=True, highlight=False)
    recorded = manifest["invocation"]
    given = encode_invocation(ctx.params)
    conflicts = [
        f"--{key.replace('_', '-')}: recorded {recorded.get(key)!r}, given {given[key]!r}"
        for key in RESUMABLE
        if ctx.get_parameter_source(key) == ParameterSource.COMMANDLINE
        and given[key] != recorded.get(key)
    ]
    if conflicts:
        raise LabError(
            f"--resume {run_dir}: options differ from the recorded run: {'; '.join(conflicts)}. "
            f"Leave them out to reuse the recorded ones."
        )
    return manifest


def clean_leftovers(out: Path) -> None:
    """Report and remove processes left behind by runs whose lab process died."""
    found = leftovers.find(out)
    if not found:
        return
    for item in found:
        console.print(f"[yellow]leftover from a dead run:[/] {escape(item.describe())}")
    leftovers.clean(found)
    alive = sum(item.alive for item in found)
    console.print(
        f"[yellow]stopped {alive} leftover process group(s), removed {len(found)} pid file(s)"
    )


STOP_SIGNALS = ("SIGTERM", "SIGHUP")


class stop_signals:  # noqa: N801 - used like a function: `with stop_signals():`
    """SIGTERM and SIGHUP stop a run like Ctrl-C: the sweep records, cleans up, exits non-zero.

    A lab started with `&` from a script inherits SIGINT ignored (POSIX shells do that to
    background jobs), so `kill -INT` would do nothing; Ctrl-C's handler is put back for the run.
    """

    SIGNALS = tuple(signal.Signals[name] for name in STOP_SIGNALS)  # exit 128 + its number

    def __enter__(self) -> None:
        self.previous = {sig: signal.signal(sig, self._raise) for sig in self.SIGNALS}
        if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
            self.previous[signal.SIGINT] = signal.signal(signal.SIGINT, signal.default_int_handler)

    def __exit__(self, *_: object) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)

    @staticmethod
    def _raise(signum: int, _: object) -> None:
        raise KeyboardInterrupt(signal.Signals(signum).name)


@main.command("models")
@click.option("--models-file", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--commands",
    "top_level",
    type=int,
    default=None,
    metavar="LEVEL",
    help='Also print each command line, with "auto" knobs resolved for this top level.',
)
def list_models(models_file: Path | None, top_level: int | None) -> None:
    """List the server models, their knobs and (with --commands) exact command lines."""
    registry = load_registry(models_file)
    out = Console()
    table = Table(title="models (baselines dimmed)")
    for column in ("model", "unit", "app", "description"):
        table.add_column(column)
    for m in registry.models.values():
        table.add_row(m.name, m.unit, m.app, m.description, style="dim" if m.baseline else None)
    out.print(table)
    out.print("knob defaults: " + ", ".join(f"{k}={v}" for k, v in vars(registry.knobs).items()))
    out.print("override per run with --knob NAME=VALUE, per scenario in its \\[knobs] table")
    if top_level is not None:
        knobs = registry.knobs.resolve(top_level)
        for m in registry.models.values():
            out.print(f"\n[bold]{m.name}[/] (capacity {m.capacity(knobs)}):", highlight=False)
            out.print(shlex.join(m.command(knobs, "127.0.0.1", 8000)), markup=False)


main.add_command(doctor)
main.add_command(report)
main.add_command(compare_runs)
main.add_command(reproduce)
main.add_command(serve)
main.add_command(ui)
main.add_command(upstream)
main.add_command(remote_generators.generator)


def entry(argv: list[str] | None = None) -> None:
    """The console script; `argv` (default: sys.argv[1:]) lets tests call it in-process."""
    try:
        main(args=argv, standalone_mode=True)
    except LabError as e:
        console.print(f"[red]error:[/] {escape(str(e))}", highlight=False)
        sys.exit(e.exit_code)
