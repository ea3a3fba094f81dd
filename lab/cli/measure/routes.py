"""`lab routes --app X`: a starting mix file from the routes the app declares.

Why: writing a mix by hand, route by route, for an app whose routes the lab can read itself
(Flask's URL map, Django's URL resolver, Starlette's routes) is where newcomers stop. The app is
imported as the check imports it, in its own environment where one is given, and nothing starts.
"""

from __future__ import annotations

from pathlib import Path

import click

from lab.cli.common.options import app_environment_options, dir_option, file_option, shown
from lab.cli.measure.app import app_pins
from lab.config import appenv, userapp
from lab.record.errors import LabError

INERT = {  # what a placeholder of --env names when `lab routes` starts nothing: the discard port
    "upstream": "http://127.0.0.1:9",
    "LAB_DB_URL": "postgresql://127.0.0.1:9/routes",
    "LAB_REDIS_URL": "redis://127.0.0.1:9/0",
}


@click.command("routes")
@click.option(
    "--app",
    "app_target",
    required=True,
    metavar="MODULE:ATTR",
    help="Your app, as `lab run --app` takes it (myapp.web:app, or 'myapp:create_app()'): "
    "a Flask, Django or Starlette/FastAPI app.",
)
@dir_option(
    "--app-dir",
    help="Directory to import --app from, as `lab run --app-dir` [default: here].",
)
@click.option(
    "--env",
    "app_env",
    multiple=True,
    metavar="NAME=VALUE",
    help="A variable of the app's environment (repeatable), e.g. "
    "DJANGO_SETTINGS_MODULE=mysite.settings; a placeholder ({postgres_url}) names a closed "
    "port: reading the routes starts no database and no upstream.",
)
@file_option(
    "--mix",
    "out",
    help="Write the mix file here, then use it with `lab run --app ... --mix FILE` "
    "[default: print it].",
)
@shown(
    "--import-timeout",
    type=float,
    default=userapp.IMPORT_TIMEOUT_S,
    help="Seconds importing the app may take.",
)
@app_environment_options
def routes(
    app_target: str, app_dir: Path | None, app_env: tuple[str, ...], out: Path | None,
    import_timeout: float, app_requirements: Path | None, app_venv: Path | None,
) -> None:  # fmt: skip
    """Read the routes your app declares (Flask's URL map, Django's URL resolver, Starlette's
    routes), importing it as `lab run --app` does (in its own environment with
    --app-requirements or --app-venv), and write a starting mix file: every route and method,
    path parameters as placeholders, GETs weighted 1, writes weighted 0 with a comment, a
    health route guessed first (docs/your-traffic.md)."""
    from lab.config import approutes

    env = appenv.parse(app_env)
    environ = {n: appenv.resolve(v, INERT["upstream"], INERT) for n, v in env}
    pins = app_pins({"app_requirements": app_requirements, "app_venv": app_venv})
    python = str(pins.bindir() / "python") if pins else ""  # the import check's interpreter
    app = userapp.inspect_app(app_target, app_dir, env, import_timeout, environ, python)
    text = approutes.mix_text(app.target, approutes.read(app, environ, import_timeout))
    if out is None:
        click.echo(text, nl=False)
        return
    try:
        out.write_text(text)
    except OSError as e:
        raise LabError(f"--mix {out}: cannot write it ({e.strerror or e})") from None
    click.echo(f"wrote {out}: use it with lab run --app {app_target} --mix {out}", err=True)
