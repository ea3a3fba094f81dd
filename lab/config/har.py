"""A HAR file (`lab run --app ... --har FILE`) read into a traffic mix: a user's session, replayed.

What browsers (the developer tools' "Save all as HAR"), proxies and API tools export: every request
with its method, URL, headers and body. The requests of one host (`--har-host`, else the commonest)
become the mix, one route per method and target (path and query), weighted by how many times it
was requested, with the headers and body of its first request. Every entry ends up in exactly one
place, a kept route or a reason it was left out, so `kept + left out == entries` always holds:

- not an entry the lab can read (no method or URL);
- a websocket (`ws:`/`wss:`, an Upgrade, a 101): no request/answer to replay;
- another host than the one loaded (a CDN, an analytics service: not the app);
- failed: no answer at all (status 0: blocked, cancelled, offline);
- answered 4xx or 5xx: replayed, it would load the app's error path (as `--access-log` does);
- a static file, by its answer's type or its extension (a front or a CDN serves those);
- a method the lab does not send (HEAD, OPTIONS, ...);
- a body larger than `MAX_BODY_BYTES` (an upload): each generator is sent every route's body.

Headers lose what belongs to one connection (hop-by-hop, HTTP/2's pseudo-headers, Host,
Content-Length), and cookies and credentials unless kept with `--har-keep cookie,authorization`:
a recorded session's cookie is one user's, and its token expires. A recorded text is sent as it
was: a brace that would start a placeholder is doubled (`lab.record.placeholders`). A file that
is not a HAR document, or is huge, is refused in one line.
"""

from __future__ import annotations

import json
import urllib.parse
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lab.config import accesslog, userapp
from lab.config.userapp import Route
from lab.record import placeholders
from lab.record.errors import LabError

MAX_HAR_BYTES = 50_000_000  # a long browser session with bodies; anything bigger is a mistake
HOP_BY_HOP = frozenset(
    [
        "connection",
        "keep-alive",
        "proxy-connection",
        "proxy-authenticate",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    ]
)
CREDENTIALS = frozenset(
    [
        "cookie",
        "authorization",
        "proxy-authorization",
        "x-csrftoken",
        "x-csrf-token",
        "x-xsrf-token",
    ]
)
NAMES_ORIGIN = frozenset(["origin", "referer"])  # they name the server a browser spoke to
STATIC_TYPES = ("image/", "font/", "video/", "audio/", "text/css", "javascript", "ecmascript")
STATIC_RESOURCES = frozenset(("image", "stylesheet", "script", "font", "media", "manifest"))
REASONS = {  # key -> words, in the order an entry is judged
    "unreadable": "not an entry with a method and a URL",
    "websocket": "a websocket (nothing to replay as a request)",
    "host": "another host than the one loaded",
    "login": accesslog.LOGIN_WORDS,
    "failed": "failed: no answer (status 0)",
    "status": "answered 4xx or 5xx",
    "static": "a static file (a front or a CDN serves those, not the app)",
    "unsendable": "a method the lab does not send (HEAD, OPTIONS, ...)",
    "large": "a body too large to replay (an upload)",
}
MAX_BODY_BYTES = 16_000  # a route's body travels in each generator's start message


@dataclass(frozen=True)
class HarMix:
    """The HAR file's mix: its routes with their request counts, and every other entry counted
    under its reason."""

    path: str
    entries: int
    host: str  # the host loaded
    routes: tuple[tuple[Route, float], ...]  # most requested first
    left_out: dict[str, int] = field(default_factory=dict)  # REASONS key -> entries

    @property
    def kept(self) -> int:
        return round(sum(w for _, w in self.routes))


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _request(entry: Any) -> tuple[str, urllib.parse.SplitResult] | None:
    """The entry's method and URL; None when it has none the lab can read."""
    request = _dict(_dict(entry).get("request"))
    method, url = request.get("method"), request.get("url")
    if not isinstance(method, str) or not isinstance(url, str):
        return None
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018  (a bad port raises here, not later)
    except ValueError:
        return None
    if not parts.scheme or not parts.netloc:
        return None
    return method.upper(), parts


def _status(entry: dict[str, Any]) -> int:
    status = _dict(entry.get("response")).get("status")
    return status if isinstance(status, int) and not isinstance(status, bool) else 0


def _websocket(entry: dict[str, Any], url: urllib.parse.SplitResult) -> bool:
    headers = _headers(entry)
    upgrade = any(n.lower() == "upgrade" and "websocket" in v.lower() for n, v in headers)
    kind = entry.get("_resourceType")
    return url.scheme in ("ws", "wss") or upgrade or kind == "websocket" or _status(entry) == 101


def _static(entry: dict[str, Any], url: urllib.parse.SplitResult) -> bool:
    content = _dict(_dict(entry.get("response")).get("content"))
    mime = content.get("mimeType")
    typed = isinstance(mime, str) and any(t in mime.lower() for t in STATIC_TYPES)
    return typed or entry.get("_resourceType") in STATIC_RESOURCES or accesslog.is_static(url.path)


def reason(entry: Any, host: str, login_path: str = "") -> str | None:
    """Why an entry is left out (a REASONS key), or None: it counts in the mix."""
    found = _request(entry)
    if found is None:
        return "unreadable"
    method, url = found
    if _websocket(entry, url):
        return "websocket"
    if host not in (url.netloc.lower(), (url.hostname or "").lower()):
        return "host"
    if login_path and (url.path or "/") == login_path:
        return "login"
    status = _status(entry)
    if status <= 0:
        return "failed"
    if status >= 400:
        return "status"
    if _static(entry, url):
        return "static"
    if method not in userapp.METHODS:
        return "unsendable"
    text = _dict(_dict(entry.get("request")).get("postData")).get("text")
    if isinstance(text, str) and len(text.encode(errors="replace")) > MAX_BODY_BYTES:
        return "large"
    return None


def _headers(entry: dict[str, Any]) -> list[tuple[str, str]]:
    headers = _dict(entry.get("request")).get("headers")
    pairs = headers if isinstance(headers, list) else []
    return [
        (h["name"], h["value"])
        for h in pairs
        if isinstance(h, dict)
        and isinstance(h.get("name"), str)
        and isinstance(h.get("value"), str)
    ]


def _kept_headers(
    entry: dict[str, Any], keep: tuple[str, ...], host: str
) -> tuple[tuple[str, str], ...]:
    """The request's headers a replay may send: one line each, valid names, none of one
    connection's, none naming the recorded server (`_names_host`), cookies and credentials
    only when kept."""
    out = []
    for name, value in _headers(entry):
        low = name.lower()
        if low.startswith(":") or low in HOP_BY_HOP or (low in CREDENTIALS and low not in keep):
            continue
        if low in NAMES_ORIGIN and _names_host(value, host):
            continue
        if userapp.HEADER.match(f"{name}: {value}") is None:
            continue
        out.append((name, placeholders.literal(value)))
    return tuple(out)


def _names_host(value: str, host: str) -> bool:
    """An Origin or Referer that names the recorded server (its host and port): replayed to
    the lab's server, on another port, a write's Origin no longer matches the host it is sent
    to, and a framework's CSRF check refuses it (Django: 403, "Origin checking failed")."""
    url = urllib.parse.urlsplit(value)
    return host in (url.netloc.lower(), (url.hostname or "").lower())


def _route(entry: dict[str, Any], keep: tuple[str, ...], host: str) -> Route:
    """The entry as a route: its target (path and query, a fragment never), headers and body."""
    found = _request(entry)
    assert found is not None
    method, url = found
    path = urllib.parse.quote(url.path or "/", safe="/%:@!$&'()*+,;=-._~")
    query = urllib.parse.quote(url.query, safe="/?%:@!$&'()*+,;=-._~")
    target = placeholders.literal(path + (f"?{query}" if query else ""))
    text = _dict(_dict(entry.get("request")).get("postData")).get("text")
    body = placeholders.literal(text) if isinstance(text, str) and method != "GET" else None
    headers = _kept_headers(entry, keep, host)
    return Route(method, target, body, headers)


def read_mix(
    document: Any, path: str, host: str = "", keep: tuple[str, ...] = (), login_path: str = ""
) -> HarMix:
    """Every entry judged once: kept under its route, or counted under its reason."""
    log = _dict(_dict(document).get("log"))
    entries = log.get("entries")
    if not isinstance(entries, list):
        raise LabError(f"--har {path}: not a HAR file (no log.entries list)")
    host = host.lower() or _commonest(entries)
    left: Counter[str] = Counter()
    counts: Counter[tuple[str, str]] = Counter()
    first: dict[tuple[str, str], Route] = {}
    for entry in entries:
        if (why := reason(entry, host, login_path)) is not None:
            left[why] += 1
            continue
        route = _route(entry, keep, host)
        key = (route.method, route.path)
        counts[key] += 1
        first.setdefault(key, route)
    routes = tuple((first[key], float(n)) for key, n in counts.most_common())
    return HarMix(path, len(entries), host, routes, dict(left))


def _commonest(entries: list[Any]) -> str:
    """The host most entries asked (websockets and unreadable entries aside)."""
    hosts: Counter[str] = Counter()
    for entry in entries:
        found = _request(entry)
        if found is not None and not _websocket(entry, found[1]):
            hosts[found[1].netloc.lower()] += 1
    return hosts.most_common(1)[0][0] if hosts else ""


def read_file(
    path: Path, host: str = "", keep: tuple[str, ...] = (), login_path: str = ""
) -> HarMix:
    """A HAR file's mix; LabError in one line if it cannot be read, is no HAR document, or
    leaves no route to load."""
    try:
        if path.stat().st_size > MAX_HAR_BYTES:
            raise LabError(f"--har {path}: larger than {MAX_HAR_BYTES} bytes; export less")
        document = json.loads(path.read_bytes())
    except OSError as e:
        raise LabError(f"--har {path}: cannot read it ({e.strerror or e})") from None
    except (ValueError, RecursionError) as e:  # JSONDecodeError and UnicodeDecodeError too
        raise LabError(f"--har {path}: not a JSON document ({str(e)[:120]})") from None
    found = read_mix(document, str(path), host, keep, login_path)
    if not found.routes:
        said = ", ".join(f"{n} {REASONS[k]}" for k, n in found.left_out.items()) or "it is empty"
        on = f" of host {found.host}" if found.host else ""
        raise LabError(f"--har {path}: no request{on} to load in {found.entries} entries ({said})")
    return found
