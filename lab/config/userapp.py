"""A user's own app (`lab run --app package.module:app`), checked and fitted to each model.

The app is imported once in a child process before any server starts, so a module that does not
import or an attribute that is no WSGI/ASGI callable gets a one-line error and nothing else runs.
Servers import it themselves, after their own gevent monkey-patching, exactly as the lab's app.
A WSGI app runs under an asyncio model only through the declared bridge (servers/user_bridge.py),
and every such model is marked `bridged`.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from lab.config import appenv
from lab.config.models import BUILTIN_MODELS, Model
from lab.record.errors import LabError

TARGET = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
HEADER = re.compile(r"^([!#$%&'*+.^_`|~0-9A-Za-z-]+):[ \t]*([^\r\n]*)$")
BRIDGE = "servers.user_bridge:app"
BRIDGE_WORDS = "asgiref's WsgiToAsgi (servers/user_bridge.py)"
IMPORT_TIMEOUT_S = 60.0

# Imports the app in a child and prints its kind: an `async def __call__` is ASGI, else WSGI.
_INSPECT = """
import importlib, inspect, json, sys
module, _, attribute = sys.argv[1].partition(":")
try:
    obj = getattr(importlib.import_module(module), attribute)
except Exception as e:
    print(json.dumps({"error": f"{type(e).__name__}: {e}".splitlines()[0]})); sys.exit()
call = getattr(obj, "__call__", None)
asgi = inspect.iscoroutinefunction(obj) or inspect.iscoroutinefunction(call)
kind = "asgi" if asgi else "wsgi" if callable(obj) and not inspect.isclass(obj) else ""
print(json.dumps({"kind": kind, "type": type(obj).__name__}))
"""


@dataclass(frozen=True)
class UserApp:
    target: str  # "package.module:attribute"
    kind: str  # "wsgi" or "asgi"
    app_dir: Path | None = None  # put first on the servers' import path
    env: appenv.Env = ()  # --env: placeholders resolved as each server starts

    def python_path(self) -> str:
        """The app's directory, the user's own PYTHONPATH (--env), then the lab's code."""
        parts = [str(self.app_dir)] if self.app_dir else []
        given = [p for n, v in self.env if n == "PYTHONPATH" for p in v.split(":") if p]
        return ":".join([*parts, *given, str(BUILTIN_MODELS.parent.parent)])


@dataclass(frozen=True)
class Route:
    """One request of the user's app, `[METHOD ]/path?query`, with the run's body and headers."""

    method: str
    path: str
    body: str | None = None  # sent with every method but GET
    headers: tuple[tuple[str, str], ...] = ()

    @property
    def label(self) -> str:
        return self.path if self.method == "GET" else f"{self.method} {self.path}"

    def request(self) -> dict[str, Any]:
        """lab.system.http_client.get's method, data and headers for this route."""
        data = self.body.encode() if self.body is not None and self.method != "GET" else None
        return {"method": self.method, "data": data, "headers": dict(self.headers)}


def parse_routes(
    texts: tuple[str, ...], body: str | None, headers: tuple[str, ...]
) -> tuple[Route, ...]:
    """`--path` values (`/orders/42`, `POST /orders`) with `--body` and `--header`; LabError
    naming the bad one."""
    pairs = tuple(_header(h) for h in headers)
    routes = []
    for text in texts:
        method, _, path = text.strip().rpartition(" ")
        method = method.strip().upper() or "GET"
        if method not in METHODS or not path.startswith("/") or any(c in path for c in " \r\n"):
            raise LabError(
                f"--path {text!r}: expected /ROUTE or METHOD /ROUTE ({', '.join(METHODS)})"
            )
        routes.append(Route(method, path, body, pairs))
    return tuple(routes)


def health_route(routes: tuple[Route, ...]) -> Route:
    """The first GET route: it stands in for /health (a server is up, and not hung after a step,
    when it answers 200), since a POST there would change the app's data."""
    for route in routes:
        if route.method == "GET":
            return route
    raise LabError("--app needs a GET --path (the first is used as the health check)")


def _header(text: str) -> tuple[str, str]:
    match = HEADER.match(text)
    if match is None:
        raise LabError(f"--header {text!r}: expected 'Name: value' on one line")
    return match.group(1), match.group(2)


def inspect_app(
    target: str,
    app_dir: Path | None,
    env: appenv.Env = (),
    timeout_s: float = IMPORT_TIMEOUT_S,
    environ: dict[str, str] | None = None,
) -> UserApp:
    """Import the app in a child process, with its environment (`environ`: `env` resolved);
    LabError naming what to fix if it is not servable."""
    if not TARGET.match(target):
        raise LabError(f"--app {target!r}: expected package.module:attribute, e.g. myapp.web:app")
    if app_dir is not None and not app_dir.is_dir():
        raise LabError(f"--app-dir {app_dir}: not a directory")
    app = UserApp(target, "wsgi", app_dir.resolve() if app_dir else None, env)
    given = environ if environ is not None else dict(env)
    try:
        done = subprocess.run(
            [sys.executable, "-c", _INSPECT, target],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env={**os.environ, **given, "PYTHONPATH": app.python_path()},
            cwd=app.app_dir or Path.cwd(),
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise LabError(
            f"--app {target}: importing it took over {timeout_s:g} s (raise --import-timeout)"
        ) from None
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise LabError(f"--app {target}: importing it crashed the interpreter ({last})")
    found = json.loads(lines[-1])
    if "error" in found:
        hint = "" if app_dir else " (use --app-dir DIR if it is not on the import path)"
        raise LabError(f"--app {target}: cannot import it: {found['error']}{hint}")
    if not found["kind"]:
        raise LabError(
            f"--app {target}: a {found['type']} is not a WSGI or ASGI application callable"
        )
    return replace(app, kind=found["kind"])


def fit(app: UserApp, model: Model) -> tuple[Model, bool] | None:
    """The model serving the user's app, and whether through the bridge; None if it cannot.

    An ASGI app cannot run under a WSGI server at all; a WSGI app under an asyncio server only
    through the declared one-thread bridge.
    """
    env = dict(model.env) | dict(app.env) | {"PYTHONPATH": app.python_path()}
    if app.kind == model.app:
        return replace(model, target=app.target, env=tuple(sorted(env.items()))), False
    if app.kind == "asgi":
        return None
    env["LAB_BRIDGED_APP"] = app.target
    bridged = replace(model, target=BRIDGE, env=tuple(sorted(env.items())), bridge=BRIDGE_WORDS)
    return bridged, True
