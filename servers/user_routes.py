"""The routes a user's app declares, read from the app itself (`lab routes --app X`).

Why a child process of its own: the app is imported as the import check imports it (its
directory, its environment, its factory called), never into the lab's process. Each framework
keeps its routes in its own table: Flask in `app.url_map`, Starlette and FastAPI in `app.routes`
(mounts nested), Django in its URL resolver. Printed as one JSON object: `routes`, each a
`path` in the framework's own syntax turned into `{name:kind}` segments (`kind`: int, uuid,
or str), its `methods`, and `note` where the lab should say something about it; or `error`.

Run as `python -m servers.user_routes MODULE:ATTR [FACTORY_ARGS]` (FACTORY_ARGS:
`repr((args, kwargs))`, as the lab parsed them).
"""

from __future__ import annotations

import ast
import importlib
import json
import re
import sys
from collections.abc import Iterator
from typing import Any

SKIP = {"HEAD", "OPTIONS"}  # answered by every framework for every route: not the app's own
FLASK_PARAM = re.compile(r"<(?:([a-zA-Z_]+)(?:\([^)]*\))?:)?([a-zA-Z_]\w*)>")
STARLETTE_PARAM = re.compile(r"\{([a-zA-Z_]\w*)(?::([a-zA-Z_]+))?\}")
DJANGO_PARAM = re.compile(r"<(?:([a-zA-Z_]+):)?([a-zA-Z_]\w*)>")
REGEX_GROUP = re.compile(r"\(\?P<([a-zA-Z_]\w*)>([^)]*)\)")
KINDS = {"int": "int", "float": "int", "uuid": "uuid"}  # anything else: str


Route = dict[str, Any]


def segment(name: str, converter: str | None) -> str:
    return f"{{{name}:{KINDS.get(converter or '', 'str')}}}"


def flask(app: Any) -> Iterator[Route]:
    for rule in app.url_map.iter_rules():
        if rule.endpoint == "static":
            continue  # the static folder's files, not a route of the app's own
        path = FLASK_PARAM.sub(lambda m: segment(m.group(2), m.group(1)), rule.rule)
        yield {"path": path, "methods": sorted(set(rule.methods or ()) - SKIP)}


def starlette(routes: list[Any], prefix: str = "") -> Iterator[Route]:
    for route in routes:
        path = prefix + getattr(route, "path", "")
        if getattr(route, "routes", None) is not None:  # a Mount or a sub-router
            yield from starlette(list(route.routes), path)
            continue
        methods = getattr(route, "methods", None)
        if methods is None:
            continue  # a WebSocket route or a mounted app without routes (static files)
        shown = STARLETTE_PARAM.sub(lambda m: segment(m.group(1), m.group(2)), path)
        found: Route = {"path": shown, "methods": sorted(set(methods) - SKIP)}
        if getattr(route, "include_in_schema", True) is False:
            found["note"] = "not in the app's schema (FastAPI's own docs pages)"
        yield found


def django() -> Iterator[Route]:
    from django.urls import URLPattern, URLResolver, get_resolver

    def walk(patterns: list[Any], prefix: str) -> Iterator[Route]:
        for p in patterns:
            text = prefix + django_path(str(p.pattern))
            if isinstance(p, URLResolver):
                yield from walk(list(p.url_patterns), text)
            elif isinstance(p, URLPattern):
                found: Route = {"path": "/" + text.lstrip("/"), "methods": view_methods(p)}
                if any(c in text for c in "^$()[]*+?\\|"):
                    found["note"] = "a regular expression the lab cannot turn into a path"
                yield found

    yield from walk(list(get_resolver().url_patterns), "")


def django_path(pattern: str) -> str:
    """`orders/<int:pk>/` or `^orders/(?P<pk>[0-9]+)/$` as `orders/{pk:int}/`."""
    text = DJANGO_PARAM.sub(lambda m: segment(m.group(2), m.group(1)), pattern)
    text = REGEX_GROUP.sub(lambda m: segment(m.group(1), digits(m.group(2))), text)
    return text.removeprefix("^").removesuffix("$").removesuffix("\\Z")


def digits(regex: str) -> str | None:
    """A named group of digits (`[0-9]+`, `\\d+`) is an int; anything else a string."""
    return "int" if "0-9" in regex or "\\d" in regex else None


def view_methods(pattern: Any) -> list[str]:
    """A view's methods: a DRF viewset's actions, a class-based view's handlers, else GET (a
    function view says nothing of its methods until called)."""
    view = pattern.callback
    actions = getattr(view, "actions", None)
    if actions:
        return sorted(m.upper() for m in actions if m.upper() not in SKIP)
    cls = getattr(view, "view_class", None)
    if cls is not None:
        named = getattr(cls, "http_method_names", ())
        return sorted(m.upper() for m in named if hasattr(cls, m) and m.upper() not in SKIP)
    return ["GET"]


def routes_of(app: Any) -> list[Route]:
    """The app's routes, looked for through middleware that wraps it (`.app`)."""
    for _ in range(8):
        if hasattr(app, "url_map"):
            return list(flask(app))
        if isinstance(getattr(app, "routes", None), list):
            return list(starlette(app.routes))
        if "django" in sys.modules and type(app).__module__.startswith("django."):
            return list(django())
        inner = getattr(app, "app", None) or getattr(app, "wsgi_app", None)
        if inner is None or inner is app:
            break
        app = inner
    raise LookupError(f"a {type(app).__name__}: not a Flask, Django or Starlette app")


def main(argv: list[str]) -> None:
    module, _, attribute = argv[0].partition(":")
    try:
        app = getattr(importlib.import_module(module), attribute)
        if len(argv) > 1 and argv[1]:
            args, kwargs = ast.literal_eval(argv[1])
            app = app(*args, **kwargs)
        print(json.dumps({"routes": routes_of(app)}))
    except Exception as e:  # noqa: BLE001 - any failure of the user's app is said, in one line
        print(json.dumps({"error": f"{type(e).__name__}: {e}".splitlines()[0]}))


if __name__ == "__main__":
    main(sys.argv[1:])
