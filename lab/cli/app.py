"""`lab run --app`: check the user's own app under every model before it is swept."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from rich.console import Console
from rich.markup import escape

from lab.backends import dbrun
from lab.cli import appmix
from lab.cli.options import console
from lab.cli.stopping import stop_signals
from lab.config import appenv, userapp
from lab.config.models import Model, Registry
from lab.config.scenario import Scenario, override
from lab.record.errors import LabError, NoAnswer
from lab.record.rundir import RunDir
from lab.run import appcheck
from lab.run.preflight import Preflight


@dataclass(frozen=True)
class CheckedApp:
    """A user's app that passed `lab.run.appcheck`: what the sweep then loads, and its evidence."""

    scenario: Scenario  # route "app": the load path, d = the route's time alone
    models: tuple[Model, ...]  # each serving the user's app
    preflights: dict[str, Preflight]
    run: RunDir  # holds appcheck.json; the sweep continues in it


def check_user_app(
    opts: dict[str, Any], registry: Registry, scenario: Scenario, tables: Console | None = None
) -> CheckedApp | None:
    """`lab run --app`: verify and probe the user's app under every model that can serve it;
    refuse it if they differ or fail. None with --check-only, else what to sweep. The check's
    tables go to `tables` (default: stdout).

    The inputs (the options, the app's import) are checked first, with nothing started or
    written (exit 2 when bad); the check itself is a measurement, not input validation: it starts
    the servers and writes appcheck.json, and an app that fails it exits 1 (`NoAnswer`) with
    that file kept as the evidence and nothing left running."""
    if opts["backend"] != "native" or opts["resume"]:
        raise LabError("--app runs with --backend native and cannot be resumed (run it again)")
    out = tables or Console()
    load = appmix.traffic(opts, scenario.paths)
    if load.log is not None:  # the log's mix and what it left out, before any load
        for table in appmix.render_log(load.log):
            out.print(table)
    routes = load.routes
    health = userapp.health_route(routes)
    env = app_env(opts, scenario)
    timeout = opts.get("import_timeout") or userapp.IMPORT_TIMEOUT_S
    stand_ins = appenv.stand_ins(env)
    app = userapp.inspect_app(opts["app_target"], opts["app_dir"], env, timeout, stand_ins)
    names = opts["models"] or [m.name for m in registry.models.values() if m.app == app.kind]
    models = registry.pick(list(names))
    for model in models:
        model.check_installed(registry.knobs.resolve(1))
    knobs = registry.knobs.updated(opts["knobs"], "--knob").resolve(scenario.max_connections)
    run = RunDir.create(opts["out"], "app")
    options = appcheck.Options(
        opts.get("compare") or "shape", scenario.start_timeout_s, scenario.upstream
    )
    dbs = (opts["db_urls"], opts["db_driver"], opts["allow_remote"], scenario.host, env)
    with stop_signals(), dbrun.serving("", run.path, *dbs):
        result = appcheck.run(app, models, knobs, routes, load.load, load.probe, run.path, options)
    for table in appcheck.render(result):
        out.print(table)
    console.print(f"written: {run.path / 'appcheck.json'}")
    if problems := result.problems():
        raise NoAnswer(f"{app.target} cannot be compared fairly: {'; '.join(problems)}")
    refuse_remote(result, opts["allow_remote"])
    if refused := appmix.unanswered(load, result.route_solo_ms()):
        raise NoAnswer(f"{app.target} cannot be swept: {refused}")
    spec = replace(appmix.app_spec(app, load, health, result.route_solo_ms()), env=env)
    if load.mix:  # what the sweep loads, and d from each route's time alone
        out.print(appmix.render_mix(load.mix, result.route_solo_ms(), spec.solo_ms))
    if opts["check_only"]:
        return None
    fitted = tuple(f[0] for m in models if (f := userapp.fit(app, m)) is not None)
    checks = {m.model: m.preflight() for m in result.models}
    return CheckedApp(override(scenario, route="app", app=spec), fitted, checks, run)


def app_env(opts: dict[str, Any], scenario: Scenario) -> appenv.Env:
    """The app's environment: the scenario's [env], then --env (the command line wins)."""
    given = dict(appenv.from_table(scenario.env, f"scenario {scenario.name}"))
    return tuple((given | dict(appenv.parse(opts.get("app_env") or ()))).items())


def refuse_remote(result: appcheck.AppCheck, allow_remote: bool) -> None:
    """No sweep while the app talks to a non-loopback address (the sweep would load that
    service), unless --allow-remote; then it is said before any load."""
    remote = result.remote()
    if not remote:
        return
    said = "; ".join(remote)
    if not allow_remote:
        raise NoAnswer(
            f"{result.app} connected to non-loopback addresses while it was checked, and the "
            f"sweep would load them: {said}; or, if you own them and mean it, --allow-remote"
        )
    console.print(f"[bold white on red] WARNING [/] the app talks to: {escape(said)}")
