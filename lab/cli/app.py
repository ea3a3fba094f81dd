"""`lab run --app`: check the user's own app under every model before it is swept."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from rich.console import Console
from rich.markup import escape

from lab.backends import dbrun
from lab.cli.options import console
from lab.cli.stopping import stop_signals
from lab.config import appenv, userapp
from lab.config.models import Model, Registry
from lab.config.scenario import AppSpec, Scenario, override
from lab.record.errors import LabError
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
    tables go to `tables` (default: stdout)."""
    if not opts["app_paths"]:
        raise LabError("--app needs at least one --path /ROUTE")
    if opts["backend"] != "native" or opts["resume"]:
        raise LabError("--app runs with --backend native and cannot be resumed (run it again)")
    given = (opts["app_body"], opts["app_headers"])
    routes = userapp.parse_routes(opts["app_paths"], *given)
    probe = userapp.parse_routes((opts["probe_path"],), *given)[0] if opts["probe_path"] else None
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
    load = probe or routes[-1]
    options = appcheck.Options(
        opts.get("compare") or "shape", scenario.start_timeout_s, scenario.upstream
    )
    dbs = (opts["db_urls"], opts["db_driver"], opts["allow_remote"], scenario.host, env)
    with stop_signals(), dbrun.serving("", run.path, *dbs):
        result = appcheck.run(app, models, knobs, routes, load, run.path, options)
    for table in appcheck.render(result):
        (tables or Console()).print(table)
    console.print(f"written: {run.path / 'appcheck.json'}")
    if problems := result.problems():
        raise LabError(f"{app.target} cannot be compared fairly: {'; '.join(problems)}")
    refuse_remote(result, opts["allow_remote"])
    if opts["check_only"]:
        return None
    labels = tuple(r.label for r in routes)
    spec = AppSpec(app.target, app.kind, labels, health.path, load.path, result.solo_ms())
    spec = replace(spec, method=load.method, body=load.body, headers=load.headers, env=env)
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
        raise LabError(
            f"{result.app} connected to non-loopback addresses while it was checked, and the "
            f"sweep would load them: {said}; or, if you own them and mean it, --allow-remote"
        )
    console.print(f"[bold white on red] WARNING [/] the app talks to: {escape(said)}")
