"""A user's own app (`lab run --app package.module:app`), checked and fitted to each model.

The app is imported once in a child process before any server starts, so a module that does not
import or an attribute that is no WSGI/ASGI callable gets a one-line error and nothing else runs.
Servers import it themselves, after their own gevent monkey-patching, exactly as the lab's app.
An app built by a factory (`package.module:create_app()`, literal arguments as gunicorn takes
them) is built once in each server process by servers/user_factory.py, under every model alike;
a factory given without `()` is recognised and refused with the fix, never served as an app.
A WSGI app runs under an asyncio model only through the declared bridge (servers/user_bridge.py),
and every such model is marked `bridged`. Servers and the import check run in the app's
directory, so its relative paths (a SQLite file, templates, a `.env`) mean what they mean there.
"""

from __future__ import annotations

import ast
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
from lab.record import placeholders
from lab.record.errors import LabError
from lab.system import appvenv, interpreters

TARGET = re.compile(r"^([A-Za-z_][\w.]*):([A-Za-z_]\w*)(\(.*\))?$", re.DOTALL)
TARGET_WORDS = "expected package.module:attribute or package.module:factory(), e.g. myapp.web:app"
FACTORY = "servers.user_factory:app"  # what every model serves for an app built by its factory
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
HEADER = re.compile(r"^([!#$%&'*+.^_`|~0-9A-Za-z-]+):[ \t]*([^\r\n]*)$")
BRIDGE = "servers.user_bridge:app"
BRIDGE_WORDS = "asgiref's WsgiToAsgi (servers/user_bridge.py)"
IMPORT_TIMEOUT_S = 60.0
# The frameworks the answer names ("your app is WSGI (Django)"), by their top-level package: the
# first of the app's type's classes (its MRO) that one of these defines. Anything else (a plain
# WSGI callable, a middleware around an app) is named by its interface alone.
FRAMEWORKS = {
    name.lower(): name
    for name in (
        "Flask", "Django", "FastAPI", "Starlette", "Quart", "Falcon", "Bottle", "Pyramid",
        "Litestar", "Sanic", "Tornado", "aiohttp",
    )
}  # fmt: skip

# Imports the app in a child (calling its factory, argv[2], if given) and prints its kind (an
# `async def __call__` is ASGI, else WSGI) and the modules of its type's classes (its framework).
# A plain function that cannot take (environ, start_response), or can take nothing at all, builds
# an app: it is a factory, never an app.
_INSPECT = """
import ast, importlib, inspect, json, sys
def say(**found):
    print(json.dumps(found)); sys.exit()
def words(e):
    return f"{type(e).__name__}: {e}".splitlines()[0]
module, _, attribute = sys.argv[1].partition(":")
try:
    obj = getattr(importlib.import_module(module), attribute)
except Exception as e:
    say(error=words(e))
if sys.argv[2]:
    args, kwargs = ast.literal_eval(sys.argv[2])
    if not callable(obj):
        say(error=f"{attribute} is a {type(obj).__name__}, not a factory to call")
    try:
        obj = obj(*args, **kwargs)
    except Exception as e:
        say(raised=words(e))
elif inspect.isfunction(obj) and not inspect.iscoroutinefunction(obj):
    def binds(*given):
        try:
            inspect.signature(obj).bind(*given)
            return True
        except TypeError:
            return False
    if binds() or not binds(1, 2):
        say(factory=True)
call = getattr(obj, "__call__", None)
asgi = inspect.iscoroutinefunction(obj) or inspect.iscoroutinefunction(call)
kind = "asgi" if asgi else "wsgi" if callable(obj) and not inspect.isclass(obj) else ""
say(kind=kind, type=type(obj).__name__, packages=[c.__module__ for c in type(obj).__mro__])
"""


@dataclass(frozen=True)
class UserApp:
    target: str  # "package.module:attribute"
    kind: str  # "wsgi" or "asgi"
    app_dir: Path | None = None  # put first on the servers' import path
    env: appenv.Env = ()  # --env: placeholders resolved as each server starts
    factory: str = ""  # a factory's literal arguments, repr((args, kwargs)); "" = an app object
    home: Path | None = None  # where servers and the import check run: --app-dir, else here
    python: str = ""  # the import check's interpreter: the app's own venv's; "" = the lab's
    framework: str = ""  # "Django", "Flask", ... (FRAMEWORKS); "": none the lab knows

    def object_name(self) -> str:
        """`module:attribute` without the factory's call."""
        return self.target.partition("(")[0]

    def served(self) -> tuple[str, dict[str, str]]:
        """What every model serves, and what it needs in its environment: the app itself, or
        servers/user_factory.py calling the factory once per server process (uWSGI's workers
        after the fork, as its `lazy-apps`)."""
        if not self.factory:
            return self.target, {}
        return FACTORY, {
            "LAB_APP_FACTORY": self.object_name(),
            "LAB_APP_FACTORY_ARGS": self.factory,
            "UWSGI_LAZY_APPS": "1",
        }

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
    expect: tuple[int, ...] = ()  # the statuses that count as its success (): any below 400

    @property
    def label(self) -> str:
        return self.path if self.method == "GET" else f"{self.method} {self.path}"

    def filled(self, source: placeholders.Source = placeholders.CHECK, user: int = 0) -> Route:
        """This route as one request sends it: its placeholders filled anew (the check's own
        values by default); itself where it has none."""
        texts = (self.path, self.body or "", *(v for _, v in self.headers))
        if not any(placeholders.found(t) for t in texts):
            return self
        values = placeholders.Values(source, user)
        path, body, headers = values.fill_request(self.path, self.body, self.headers)
        return replace(self, path=path, body=body, headers=headers)

    def request(self) -> dict[str, Any]:
        """lab.system.http_client.get's method, data and headers for this route."""
        data = self.body.encode() if self.body is not None and self.method != "GET" else None
        return {"method": self.method, "data": data, "headers": dict(self.headers)}


def parse_routes(
    texts: tuple[str, ...], body: str | None, headers: tuple[str, ...]
) -> tuple[Route, ...]:
    """`--path` values (`/orders/42`, `POST /orders`) with `--body` and `--header`; LabError
    naming the bad one."""
    pairs = tuple(parse_header(h) for h in headers)
    for text in (body or "", *headers):
        placeholders.compile_text(text, "--body" if text == body else f"--header {text!r}")
    routes = []
    for text in texts:
        method, _, path = text.strip().rpartition(" ")
        method = method.strip().upper() or "GET"
        if method not in METHODS or not path.startswith("/") or any(c in path for c in " \r\n"):
            raise LabError(
                f"--path {text!r}: expected /ROUTE or METHOD /ROUTE ({', '.join(METHODS)})"
            )
        placeholders.compile_text(path, f"--path {text!r}")  # a bad placeholder: refused now
        routes.append(Route(method, path, body, with_type(method, body, pairs)))
    return tuple(routes)


def with_type(
    method: str, body: str | None, headers: tuple[tuple[str, str], ...]
) -> tuple[tuple[str, str], ...]:
    """The headers, with `Content-Type: application/json` where the route sends a body that is
    a JSON object or array and no header names a content type (Flask's `get_json()` answers
    415 without it)."""
    if method == "GET" or body is None or not placeholders.is_json(body):
        return headers
    if any(name.lower() == "content-type" for name, _ in headers):
        return headers
    return (*headers, ("Content-Type", "application/json"))


def health_route(routes: tuple[Route, ...]) -> Route:
    """The first GET route without placeholders: it stands in for /health (a server is up, and
    not hung after a step, when it answers under 500: a login's 302 or 401 counts), since a
    POST there would change the app's data; the same request every time."""
    for route in routes:
        if route.method == "GET" and not placeholders.found(route.path):
            return route
    raise LabError(
        "--app needs a GET --path without placeholders (the first is used as the health check)"
    )


def parse_header(text: str) -> tuple[str, str]:
    match = HEADER.match(text)
    if match is None:
        raise LabError(f"--header {text!r}: expected 'Name: value' on one line")
    return match.group(1), match.group(2)


def parse_target(target: str) -> tuple[str, str]:
    """`--app` as `module:attribute` and, for a factory, its literal arguments as
    `repr((args, kwargs))` (gunicorn's rule: literals only, parsed, never evaluated); "" for an
    app object. LabError naming what is wrong."""
    match = TARGET.match(target.strip())
    if match is None:
        raise LabError(f"--app {target!r}: {TARGET_WORDS}")
    module, attribute, call = match.groups()
    if call is None:
        return f"{module}:{attribute}", ""
    bad = (
        f"--app {target!r}: a factory's arguments must be literals (strings, numbers, True, "
        "False, None, lists, dicts), e.g. myapp:create_app('production', debug=False)"
    )
    try:
        node = ast.parse(attribute + call, mode="eval").body
    except SyntaxError:
        raise LabError(bad) from None
    if (
        not isinstance(node, ast.Call)
        or not isinstance(node.func, ast.Name)
        or any(isinstance(a, ast.Starred) for a in node.args)
        or any(k.arg is None for k in node.keywords)
    ):
        raise LabError(bad)
    try:
        args = tuple(ast.literal_eval(a) for a in node.args)
        kwargs = {str(k.arg): ast.literal_eval(k.value) for k in node.keywords}
        text = repr((args, kwargs))
        same = ast.literal_eval(text) == (args, kwargs)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        raise LabError(bad) from None
    if not same:  # a value whose repr is no literal (inf, nan)
        raise LabError(bad)
    return f"{module}:{attribute}", text


def inspect_app(
    target: str,
    app_dir: Path | None,
    env: appenv.Env = (),
    timeout_s: float = IMPORT_TIMEOUT_S,
    environ: dict[str, str] | None = None,
    python: str = "",
) -> UserApp:
    """Import the app in a child process, in the app's directory, with its environment
    (`environ`: `env` resolved against the run's services) and interpreter (`python`: the app's
    own venv's; "" = the lab's); a factory is called there, as each server will. LabError
    naming what to fix if it is not servable."""
    name, factory = parse_target(target)
    if app_dir is not None and not app_dir.is_dir():
        raise LabError(f"--app-dir {app_dir}: not a directory")
    given_dir = app_dir.resolve() if app_dir else None
    home = given_dir or Path.cwd()
    app = UserApp(target.strip(), "wsgi", given_dir, env, factory, home, python)
    found = in_child(app, ["-c", _INSPECT, name, factory], environ, timeout_s)
    return replace(app, kind=_kind(app, found), framework=framework_of(found.get("packages", [])))


def framework_of(modules: list[str]) -> str:
    """The framework that defines the app's type or one of its bases (`FRAMEWORKS`), from the
    modules of its MRO, nearest first; "" when none is one the lab knows."""
    for module in modules:
        if name := FRAMEWORKS.get(module.partition(".")[0].lower()):
            return name
    return ""


def in_child(
    app: UserApp, argv: list[str], environ: dict[str, str] | None, timeout_s: float
) -> dict[str, Any]:
    """The JSON object a Python child printed last, run as the import check runs: in the app's
    directory, with its environment (`environ`, else its --env as given) and import path;
    LabError when it took too long or printed none (it crashed the interpreter)."""
    given = environ if environ is not None else dict(app.env)
    try:
        done = subprocess.run(
            [app.python or sys.executable, *argv],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env={**os.environ, **given, "PYTHONPATH": app.python_path()},
            cwd=app.home,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise LabError(
            f"--app {app.target}: importing it took over {timeout_s:g} s (raise --import-timeout)"
        ) from None
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise LabError(f"--app {app.target}: importing it crashed the interpreter ({last})")
    found: dict[str, Any] = json.loads(lines[-1])
    return found


def _kind(app: UserApp, found: dict[str, Any]) -> str:
    """The app's kind from what the import child found; LabError saying what to fix."""
    target, name = app.target, app.object_name()
    if "error" in found:
        hint = "" if app.app_dir else " (use --app-dir DIR if it is not on the import path)"
        raise LabError(f"--app {target}: cannot import it: {found['error']}{hint}")
    if "raised" in found:
        raise LabError(f"--app {target}: the factory raised {found['raised']}")
    if found.get("factory"):
        attribute = name.partition(":")[2]
        raise LabError(
            f"--app {target}: {attribute} is a function that builds the app (a factory), not a "
            f"WSGI or ASGI app; call it: --app '{name}()'"
        )
    if not found["kind"]:
        kind = found["type"]
        said = f"{name}() returned a {kind}, which" if app.factory else f"a {kind}"
        raise LabError(f"--app {target}: {said} is not a WSGI or ASGI application callable")
    return str(found["kind"])


def in_environment(model: Model, kind: str, pins: appvenv.AppPins) -> Model:
    """The model serving an app of `kind` from a venv of the app's pins and what its server
    process imports besides the app: its server's packages (pyproject.toml's versions), and
    asgiref where an asyncio server serves a WSGI app through servers/user_bridge.py (the
    factory's servers/user_factory.py needs the standard library only). LabError naming a pin
    the model cannot live with."""
    bridge = ("asgiref",) if model.app == "asgi" and kind == "wsgi" else ()
    needs = interpreters.pinned((*model.requires, *bridge))
    return replace(model, venv=str(appvenv.model_venv(pins, model.name, needs)))


def fit(app: UserApp, model: Model) -> tuple[Model, bool] | None:
    """The model serving the user's app, and whether through the bridge; None if it cannot.

    An ASGI app cannot run under a WSGI server at all; a WSGI app under an asyncio server only
    through the declared one-thread bridge. Either way the server runs in the app's directory.
    """
    served, needs = app.served()
    env = dict(model.env) | dict(app.env) | {"PYTHONPATH": app.python_path()} | needs
    cwd = str(app.home or "")
    if app.kind == model.app:
        return replace(model, target=served, env=tuple(sorted(env.items())), cwd=cwd), False
    if app.kind == "asgi":
        return None
    env["LAB_BRIDGED_APP"] = served
    bridged = replace(
        model, target=BRIDGE, env=tuple(sorted(env.items())), bridge=BRIDGE_WORDS, cwd=cwd
    )
    return bridged, True
