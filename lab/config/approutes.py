"""A starting mix file from the routes an app declares (`lab routes --app X`).

Why: writing a mix file by hand, route by route, for an app whose routes the framework already
holds (Flask's URL map, Django's URL resolver, Starlette's and FastAPI's routes) is slow and
misses routes. The app is imported as the import check imports it (`userapp.in_child`: its
directory, its environment, its factory called) by `servers/user_routes.py`, and its routes
become a mix file (`lab.config.mixfile`) to edit, never to trust blindly:

- every route with each of its methods, a path parameter as a placeholder the mix accepts (an
  int as `{choice:1|2|3}`, a UUID as `{uuid}`, anything else as `{choice:a|b|c}`), with a
  comment to put the values the app's data holds there (or `{line:ids.txt}`);
- GETs weighted 1; writes (any other method), and GETs whose name says they change data
  (`/delete/`, `/logout`), present but weighted 0 with a comment: loading one needs its body;
- a health route guessed (`/health`, `/healthz`, `/ping`, ... else `/`, else the first GET
  without parameters) written first, since the first GET without placeholders is the one that
  proves a server is up (`userapp.health_route`); a health route itself is weighted 0.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass

from lab.config import userapp
from lab.config.userapp import UserApp
from lab.record.errors import LabError

CHILD = ("-m", "servers.user_routes")
SEGMENT = re.compile(r"\{([A-Za-z_]\w*):(int|uuid|str)\}")
VALUES = {"int": "{choice:1|2|3}", "uuid": "{uuid}", "str": "{choice:a|b|c}"}
HEALTH = ("/health", "/healthz", "/health/", "/healthz/", "/ping", "/status", "/ready", "/live")
# A GET whose name says it changes data: loading it would delete or log out as it measures.
CHANGES = re.compile(r"/(delete|remove|toggle|logout|log-out|signout|import|add)[/_-]?", re.I)
# A login form: each simulated user signs in once through `lab run --login`, apart from the mix.
LOGIN = re.compile(r"/(login|log-in|signin|sign-in)/?$", re.I)


@dataclass(frozen=True)
class Declared:
    """One route as the app declares it: its path with `{name:kind}` segments, one method,
    and what the framework said of it (`note`)."""

    path: str
    method: str
    note: str = ""

    @property
    def params(self) -> tuple[str, ...]:
        return tuple(m.group(1) for m in SEGMENT.finditer(self.path))

    def mix_path(self) -> str:
        """The path with a placeholder per parameter: one the mix file accepts."""
        return SEGMENT.sub(lambda m: VALUES[m.group(2)], self.path)


def read(app: UserApp, environ: dict[str, str] | None, timeout_s: float) -> tuple[Declared, ...]:
    """The app's routes, one per method, read from the app in a child; LabError naming what to
    fix when the app does not import or is no Flask, Django or Starlette app."""
    found = userapp.in_child(app, [*CHILD, app.object_name(), app.factory], environ, timeout_s)
    if "error" in found:
        raise LabError(f"--app {app.target}: cannot read its routes: {found['error']}")
    routes = tuple(
        dict.fromkeys(  # each once, in the app's order; methods a mix cannot send left out
            Declared(str(r["path"]), str(m), str(r.get("note", "")))
            for r in found["routes"]
            for m in sorted(r["methods"], key=lambda m: (m != "GET", m))  # a read first
            if m in userapp.METHODS
        )
    )
    if not routes:
        raise LabError(f"--app {app.target}: the app declares no route")
    return routes


def health(routes: tuple[Declared, ...]) -> Declared:
    """The guessed health route: a conventional name, else `/`, else the first plain GET."""
    plain = [r for r in routes if r.method == "GET" and not r.params and not r.note]
    if not plain:
        raise LabError(
            "the app declares no GET route without parameters to prove a server is up: "
            "add one (a /health view) or write the mix file by hand"
        )
    by_name = [r for name in (*HEALTH, "/") for r in plain if r.path == name]
    return (by_name or plain)[0]


def mix_text(target: str, routes: tuple[Declared, ...]) -> str:
    """The mix file for `routes`, the health route first; loads with `lab.config.mixfile`."""
    first = health(routes)
    rest = [r for r in routes if r != first]
    head = [
        f"# A starting mix for {target}, written by `lab routes` from the routes the app",
        "# declares. Edit it: the weights are each route's share of the requests (0: checked,",
        "# not loaded); put values your data holds in place of each {choice:...}.",
        "",
    ]
    return "\n".join([*head, *_table(first, health=True), *(x for r in rest for x in _table(r))])


def _table(route: Declared, health: bool = False) -> Iterator[str]:
    weight, why = _weight(route, health)
    yield from (f"# {line}" for line in why)
    yield "[[route]]"
    if route.method != "GET":
        yield f"method = {json.dumps(route.method)}"
    yield f"path = {json.dumps(route.mix_path())}"
    yield f"weight = {weight}"
    yield ""


def _weight(route: Declared, health: bool) -> tuple[int, list[str]]:
    """Its weight and the comments that say why."""
    why = [f"{{{p}}}: values your data holds, or {{line:ids.txt}}" for p in route.params]
    if health:
        conventional = route.path in HEALTH
        said = "weighted 0: checked, not loaded" if conventional else "also loaded"
        return (0 if conventional else 1), [f"the health route (guessed; {said})", *why]
    if route.note:
        return 0, [f"{route.note}: weighted 0", *why]
    if LOGIN.search(route.path):
        said = f"lab run --login 'POST {route.path}' (a session per user)"
        return 0, [f"the login (guessed): weighted 0; sign each user in with {said}", *why]
    if route.method != "GET":
        line = "a write: add its body (body = {...} or body_file) and a weight to load it"
        return 0, [line, *why]
    if CHANGES.search(route.path):
        return 0, ["its name says it changes data: weighted 0 (a GET the load would repeat)", *why]
    return 1, why
