"""`lab run --app` and `lab advise --app`: check the user's own app under every model before it is
swept (its environment, databases, login and routes), and refuse what must not be measured."""

from __future__ import annotations

import shutil
import sys
from contextlib import suppress
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from lab.backends import dbrun
from lab.backends.dbdata import DataSpec
from lab.cli.common.options import LOGIN_ONLY, console
from lab.cli.common.stopping import stop_signals
from lab.cli.measure import appmix
from lab.config import appenv, userapp
from lab.config.models import Model, Registry
from lab.config.scenario import Scenario, override
from lab.record import placeholders
from lab.record.errors import LabError, NoAnswer
from lab.record.login import Login, parse_login
from lab.record.rundir import RunDir
from lab.run import appcheck
from lab.run.preflight import Preflight
from lab.system import appvenv
from lab.system.appvenv import AppPins


@dataclass(frozen=True)
class CheckedApp:
    """A user's app that passed `lab.run.appcheck`: what the sweep then loads, and its evidence."""

    scenario: Scenario  # route "app": the load path, d = the route's time alone
    models: tuple[Model, ...]  # each serving the user's app
    preflights: dict[str, Preflight]
    run: RunDir  # holds appcheck.json; the sweep continues in it
    data: DataSpec  # the app's schema and seed: the sweep's databases are set up the same way


def check_user_app(
    opts: dict[str, Any], registry: Registry, scenario: Scenario, tables: Console | None = None
) -> CheckedApp | None:
    """`lab run --app`: verify and probe the user's app under every model that can serve it;
    refuse it if they differ or fail. None with --check-only, else what to sweep. The check's
    tables go to `tables` (default: stdout).

    The inputs (the options, --app's form) are checked first, with nothing started or written
    (exit 2 when bad); the app is then imported with the run's services up (an import refused
    there leaves nothing behind). The check itself is a measurement, not input validation: it
    starts the servers and writes appcheck.json, and an app that fails it exits 1 (`NoAnswer`)
    with that file kept as the evidence and nothing left running."""
    if opts["backend"] != "native":
        raise LabError("--app runs with --backend native")
    out = tables or Console()
    load = appmix.traffic(opts, scenario.paths)
    if load.log is not None:  # the log's mix and what it left out, before any load
        for table in appmix.render_log(load.log):
            out.print(table)
    if load.har is not None:  # and the HAR file's
        for table in appmix.render_har(load.har):
            out.print(table)
    health = userapp.health_route(load.routes)
    refuse_writes((*load.routes, *([load.probe] if load.probe else [])), opts)
    env = app_env(opts, scenario)
    userapp.parse_target(opts["app_target"])  # a malformed --app: refused before anything runs
    login = login_of(opts, load.login)  # a malformed --login or --csrf too
    pins = app_pins(opts)  # the app's own environment, made before any run directory
    data = data_spec(opts, env, pins)
    resumed = opts.get("resume")  # checked again, into the run it continues
    run = RunDir.existing(resumed) if resumed else RunDir.create(opts["out"], "app")
    given = (opts.get("compare") or "shape", scenario.start_timeout_s, scenario.upstream)
    options = appcheck.Options(*given, scenario.probe_k, login, pins)
    checking = (opts, registry, scenario, env, load, run, options, data)
    app, models, result = services_and_check(*checking)
    for table in appcheck.render(result):
        out.print(table)
    console.print(f"written: {run.path / 'appcheck.json'}")
    if problems := result.problems():
        raise NoAnswer(f"{app.target} cannot be compared fairly: {'; '.join(problems)}")
    refuse_remote(result, opts["allow_remote"])
    if refused := appmix.unanswered(load, result.route_solo_ms()):
        raise NoAnswer(f"{app.target} cannot be swept: {refused}")
    spec = appmix.app_spec(app, load, health, result.route_solo_ms())
    spec = replace(spec, env=env, login=login, environment=pins)
    if load.mix:  # what the sweep loads, and d from each route's time alone
        out.print(appmix.render_mix(load.mix, result.route_solo_ms(), spec.solo_ms))
    if opts["check_only"]:
        return None
    fitted = tuple(f[0] for m in models if (f := userapp.fit(app, m)) is not None)
    checks = {m.model: m.preflight() for m in result.models}
    scenario = override(scenario, route="app", app=spec)
    if resumed:  # d stays the one measured when the run began
        scenario = appmix.recorded_solo(scenario, run.manifest())
    return CheckedApp(scenario, fitted, checks, run, data)


def services_and_check(
    opts: dict[str, Any],
    registry: Registry,
    scenario: Scenario,
    env: appenv.Env,
    load: appmix.Traffic,
    run: RunDir,
    options: appcheck.Options,
    data: DataSpec,
) -> tuple[userapp.UserApp, list[Model], appcheck.AppCheck]:
    """With the run's databases and upstream up: import the app (calling its factory) in the
    environment every server gets, real URLs, so an app that builds an engine or connects as it
    starts is checked as it will run (in its own venv, where it has one); then check it under
    every model, each in its venv of the app's pins where it has them. An app refused before
    any server started (at its import, a model its pins refuse) leaves no run directory."""
    dbs = (opts["db_urls"], opts["db_driver"], opts["allow_remote"], scenario.host, env)
    fast = opts.get("db_durability") == "fast"
    pins, started = options.environment, False
    try:
        with (
            stop_signals(),
            dbrun.serving("", run.path, *dbs, data=data, fast=fast),
            appcheck.upstream(env, run.path, options) as upstream_url,
        ):
            dbrun.fresh_copy("the import check")
            timeout = opts.get("import_timeout") or userapp.IMPORT_TIMEOUT_S
            environ = appenv.resolved(env, upstream_url)
            target, app_dir = opts["app_target"], opts["app_dir"]
            python = str(pins.bindir() / "python") if pins else ""
            app = userapp.inspect_app(target, app_dir, env, timeout, environ, python)
            kind = app.kind
            names = opts["models"] or [m.name for m in registry.models.values() if m.app == kind]
            models = registry.pick(list(names))
            models = [userapp.in_environment(m, kind, pins) for m in models] if pins else models
            for model in models:
                model.check_installed(registry.knobs.resolve(1))
            knobs = registry.knobs.updated(opts["knobs"], "--knob").resolve(
                scenario.max_connections
            )
            given = (knobs, load.routes, load.load, load.probe, run.path, options, upstream_url)
            started = True
            return app, models, appcheck.run(app, models, *given)
    except LabError:
        if not started and not opts.get("resume"):
            shutil.rmtree(run.path, ignore_errors=True)
            with suppress(OSError):  # --out too, when this run was all it held
                run.path.parent.rmdir()
        raise


def login_of(opts: dict[str, Any], route: userapp.Route | None = None) -> Login | None:
    """--login and its options, or the mix file's `login = true` route (`route`) with them, as
    the login record (None: none); LabError naming a bad one, one given without a login, or
    both logins given."""
    if opts.get("login") and route is not None:
        raise LabError(f"--login and the mix file's login = true route ({route.label}): keep one")
    if not opts.get("login") and route is None:
        if given := [f"--{o}" for o, k in LOGIN_ONLY.items() if k != "login" and opts.get(k)]:
            raise LabError(f"{', '.join(given)}: only with --login 'METHOD /PATH'")
        return None
    keys = ("login_body", "login_headers", "csrf", "login_page", "login_cookie")
    body, headers, csrf, page, cookie = (opts.get(k) for k in keys)
    if route is None:
        login = parse_login(opts["login"], body, tuple(headers or ()), csrf, page, cookie)
    else:
        login = parse_login(f"{route.method} {route.path}", route.body, (), csrf, page, cookie)
        login = replace(login, headers=route.headers)
    return placeholders.checked_login(login)


def data_spec(opts: dict[str, Any], env: appenv.Env, pins: AppPins | None = None) -> DataSpec:
    """--db-setup and --db-seed, run in the app's directory with its import path and its own
    venv's programs first on PATH (`pins`; None: the lab's Python)."""
    app_dir = opts["app_dir"].resolve() if opts["app_dir"] else None
    seed = opts.get("db_seed")
    if seed is not None and not seed.is_file():
        raise LabError(f"--db-seed {seed}: no such file")
    return DataSpec(
        tuple(opts.get("db_setup") or ()),
        seed.resolve() if seed else None,
        app_dir or Path.cwd(),
        env,
        userapp.UserApp(opts["app_target"], "wsgi", app_dir, env).python_path(),
        str(pins.bindir()) if pins else "",
    )


def app_pins(opts: dict[str, Any]) -> AppPins | None:
    """--app-requirements or --app-venv, the app's own venv made (once; cached): the
    environment the app runs in; None for neither (the lab's own). LabError for both, or
    --app-venv with --python (the venv has its interpreter)."""
    requirements: Path | None = opts.get("app_requirements")
    venv: Path | None = opts.get("app_venv")
    if requirements and venv:
        raise LabError("--app-requirements and --app-venv each give the app's environment: one")
    if venv and opts.get("python"):
        raise LabError(f"--app-venv {venv} runs under its own interpreter: drop --python")
    if venv is not None:
        pins = appvenv.from_venv(venv)
    elif requirements is not None:
        pins = appvenv.from_requirements(requirements, opts.get("python") or sys.executable)
    else:
        return None
    console.print(f"the app's environment: {escape(pins.given)} (venvs cached, made once)")
    return appvenv.app_venv(pins)


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


READ_ONLY = ("GET", "HEAD", "OPTIONS")


def refuse_writes(routes: tuple[userapp.Route, ...], opts: dict[str, Any]) -> None:
    """Against the user's own database (--db-url) only routes that read run, unless
    --allow-writes: the check and every step would otherwise write to data the lab never
    copies (its own databases are copies, so there any route runs)."""
    writing = [r.label for r in routes if r.method.upper() not in READ_ONLY]
    if writing and opts.get("db_urls") and not opts.get("allow_writes"):
        raise LabError(
            f"--db-url is your own database and {', '.join(writing)} would write to it in the "
            "check and every step: load only GET routes, use the lab's copies (drop --db-url), "
            "or add --allow-writes"
        )
