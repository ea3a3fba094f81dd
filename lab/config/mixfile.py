"""A mix file (`lab run --app ... --mix FILE`): the traffic mix as TOML, one table per route.

Why a file beside `--path '/orders#5'`: a real app's writes each need their own method, body and
headers (`POST /orders` and `PUT /profile` cannot share `--body`), and a content type; a
command line cannot hold that legibly. Each `[[route]]` table:

    [[route]]
    method = "POST"                  # default GET
    path = "/orders?src=lab"         # required
    weight = 5                       # its share of the requests; default 1; 0: checked only
    headers = { X-Api-Key = "k" }    # on top of --header (a route's own wins by name)
    body = { sku = "{choice:a|b}", email = "u{n}@example.com" }   # or body_file = "order.json"
    expect = [201]                   # statuses that count as success; default any below 400
    login = true                     # the session's login step, not part of the mix

A body given as a TOML table or array is sent as JSON; a string is sent as it is, and either goes
with `Content-Type: application/json` when it is a JSON object or array, unless a header names
the content type. `body_file` and a `{line:FILE}` placeholder's FILE are read relative to the
mix file. A route without a body or
headers takes --body and --header. Paths, headers and bodies may hold placeholders
(`lab.record.placeholders`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lab.config import userapp
from lab.config.toml import check_table, load_toml
from lab.record import placeholders
from lab.record.errors import LabError

KEYS: dict[str, type | tuple[type, ...]] = {
    "method": str,
    "path": str,
    "weight": (int, float),
    "headers": dict,
    "body": (str, dict, list),
    "body_file": str,
    "expect": list,
    "login": bool,
}
MAX_BODY_BYTES = 100_000  # as much as a mix may carry in all (`lab.config.mix.MAX_MIX_BYTES`)


@dataclass(frozen=True)
class FileRoute:
    """One route of the mix file: the request, its weight, and whether it is the login step."""

    route: userapp.Route
    weight: float
    login: bool = False


def read(path: Path, body: str | None, headers: tuple[str, ...]) -> tuple[FileRoute, ...]:
    """Every route of the mix file, with --body and --header as defaults; LabError naming the
    file, the route and what to fix."""
    data = load_toml(path)
    if set(data) - {"route"}:
        extra = ", ".join(sorted(set(data) - {"route"}))
        raise LabError(f"--mix {path}: unknown key(s) {extra}: write each route as [[route]]")
    tables = data.get("route")
    if not isinstance(tables, list) or not tables:
        raise LabError(f"--mix {path}: no route: write each one as a [[route]] table")
    defaults = userapp.parse_routes(("GET /",), None, headers)[0].headers
    found = tuple(
        _route(t, f"--mix {path}: route {i}", path.parent, body, defaults)
        for i, t in enumerate(tables, 1)
    )
    if sum(f.login for f in found) > 1:
        raise LabError(f"--mix {path}: more than one route says login = true: keep one")
    labels = [f.route.label for f in found]
    if dup := sorted({label for label in labels if labels.count(label) > 1}):
        raise LabError(f"--mix {path}: {', '.join(dup)} listed twice: list each route once")
    if not any(f.weight > 0 and not f.login for f in found):
        raise LabError(f"--mix {path}: no route with a weight above 0 to load")
    return found


def _route(
    table: Any,
    where: str,
    home: Path,
    default_body: str | None,
    default_headers: tuple[tuple[str, str], ...],
) -> FileRoute:
    table = check_table(table, where, KEYS)
    if "path" not in table:
        raise LabError(f'{where}: needs a path, e.g. path = "/orders"')
    method = table.get("method", "GET").upper()
    try:
        path = placeholders.anchored(table["path"], home)  # {line:FILE} beside the mix file
        route = userapp.parse_routes((f"{method} {path}",), None, ())[0]
    except LabError as e:  # said of a --path: said here of the mix file's route
        raise LabError(f"{where}: {str(e).removeprefix('--path ')}") from None
    where = f"{where} ({route.label})"
    weight = float(table.get("weight", 1))
    if weight < 0:
        raise LabError(f"{where}.weight: must be >= 0, got {weight:g}")
    body = _body(table, where, home)
    body = placeholders.anchored(body, home) if body is not None else None
    body = default_body if body is None and route.method != "GET" else body
    own = tuple(_pair(k, v, where, home) for k, v in table.get("headers", {}).items())
    names = {k.lower() for k, _ in own}
    pairs = (*((k, v) for k, v in default_headers if k.lower() not in names), *own)
    if route.method == "GET" and body is not None:
        raise LabError(f"{where}: a GET route sends no body; give it a method such as POST")
    expect = _expect(table.get("expect", []), where)
    compiled = (route.path, *(v for _, v in pairs), *([body] if body is not None else []))
    for text in compiled:
        placeholders.compile_text(text, where)  # refused here, before anything runs
    headers = userapp.with_type(route.method, body, pairs)
    full = userapp.Route(route.method, route.path, body, headers, expect)
    return FileRoute(full, weight, bool(table.get("login", False)))


def _body(table: dict[str, Any], where: str, home: Path) -> str | None:
    """The route's body: a table or array as JSON, a string as it is, or body_file's text."""
    if "body" in table and "body_file" in table:
        raise LabError(f"{where}: body or body_file, not both")
    if "body_file" in table:
        file = home / str(table["body_file"])
        try:
            if file.stat().st_size > MAX_BODY_BYTES:
                raise LabError(f"{where}.body_file {file}: larger than {MAX_BODY_BYTES} bytes")
            return file.read_text()
        except UnicodeDecodeError:
            raise LabError(f"{where}.body_file {file}: not a UTF-8 text file") from None
        except OSError as e:
            raise LabError(
                f"{where}.body_file {file}: cannot read it ({e.strerror or e})"
            ) from None
    body = table.get("body")
    if isinstance(body, dict | list):
        return json.dumps(body, separators=(",", ":"), default=str)
    return str(body) if body is not None else None


def _pair(name: str, value: Any, where: str, home: Path) -> tuple[str, str]:
    if not isinstance(value, str):
        raise LabError(f"{where}.headers.{name}: expected a string, got {type(value).__name__}")
    try:
        return userapp.parse_header(f"{name}: {placeholders.anchored(value, home)}")
    except LabError:
        raise LabError(
            f"{where}.headers: {name!r} = {value!r} is no header (one line, a token name)"
        ) from None


def _expect(statuses: list[Any], where: str) -> tuple[int, ...]:
    if any(isinstance(s, bool) or not isinstance(s, int) or not 100 <= s <= 599 for s in statuses):
        raise LabError(f"{where}.expect: a list of HTTP statuses (100-599), e.g. expect = [201]")
    return tuple(statuses)
