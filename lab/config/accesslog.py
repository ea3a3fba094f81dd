"""A production access log read into a traffic mix: which routes, in which shares.

Reads the common and combined log formats (nginx's default `combined`, Apache's `common` and
`combined`, gunicorn's `--access-logfile`) and uWSGI's default request log, line by line, so a
log of any size costs one pass. Every line ends up in exactly one place: a kept route, or a
reason it was left out (it does not parse, its answer was 4xx/5xx, its method changes data, the
lab cannot send its method, it asks for a static file, its route is beyond the top N), so
`kept + left out == lines` always holds and nothing raises on a line, whatever its bytes.

Routes are grouped by their shape: `/orders/42` and `/orders/43` are one route,
`/orders/{id}` (a segment of digits, a UUID or a long hex id is an id), and the query does not
split a route. Each group is loaded as its most frequent concrete request.
"""

from __future__ import annotations

import functools
import gzip
import re
import urllib.parse
import zlib
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from lab.config.mix import MixRoute
from lab.record.errors import LabError

TOP_ROUTES = 10  # routes kept by default; the rest are counted as "beyond the top"
SENDABLE = ("GET", "POST", "PUT", "PATCH", "DELETE")  # what the lab's generator sends
CHANGES_DATA = ("POST", "PUT", "PATCH", "DELETE")  # left out unless allowed
STATIC_SUFFIXES = frozenset(
    [
        ".css",
        ".js",
        ".mjs",
        ".map",
        ".png",
        ".jpg",
        ".jpeg",
        ".gif",
        ".svg",
        ".ico",
        ".webp",
        ".avif",
        ".bmp",
        ".woff",
        ".woff2",
        ".ttf",
        ".otf",
        ".eot",
        ".mp4",
        ".webm",
        ".mp3",
        ".ogg",
        ".wav",
        ".pdf",
        ".zip",
        ".gz",
        ".tar",
        ".txt",
        ".wasm",
    ]
)
STATIC_PREFIXES = ("/static/", "/media/", "/assets/", "/public/", "/favicon")
# A capture of real traffic holds its users' logins; with --login each simulated user sends the
# login once, before the mix, so the login's path (its form and its POST) is not part of the mix.
LOGIN_WORDS = "the login's path (--login: each user sends it once, apart from the mix)"
REASONS = {  # key -> words, in the order a line is judged
    "unparsed": "does not parse as a request line",
    "login": LOGIN_WORDS,
    "status": "answered 4xx or 5xx",
    "method": "a method that changes data (allow it with --log-methods)",
    "unsendable": "a method the lab does not send (HEAD, OPTIONS, ...)",
    "static": "a static file (a front or a CDN serves those, not the app)",
    "beyond_top": "a route beyond the top routes kept",
}

# `host ident user [time] "request" status size` and, combined, `"referer" "agent"` after it;
# searched from the time on, so a prefix (syslog's, `docker compose logs`'s) is no matter.
_COMMON = re.compile(
    r'\[[^\]]*\] "(?P<request>(?:[^"\\]|\\.)*)" (?P<status>\d{3}) (?:\d+|-)'
    r'(?P<combined> "(?:[^"\\]|\\.)*" "(?:[^"\\]|\\.)*")?'
)
# uWSGI's default: `[pid: 1|app: 0|req: 1/1] addr () {n vars in n bytes} [time] GET /p => ...`
# (after `--log-date`'s date, if any).
_UWSGI = re.compile(
    r"\[pid: \d+\|app: -?\d+\|req: -?\d+/\d+\] \S+ \(.*?\) \{[^}]*\} \[[^\]]*\] "
    r"(?P<method>\S+) (?P<target>\S+) => generated \d+ bytes in \d+ \w+ "
    r"\(HTTP/[\d.]+ (?P<status>\d{3})\)"
)
_METHOD = re.compile(r"^[A-Z]{3,10}$")
_ID = re.compile(
    r"^(?:\d+|[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
    r"|(?=[0-9a-fA-F]*\d)[0-9a-fA-F]{16,})$"
)


@dataclass(frozen=True)
class Line:
    """What one log line asked for: the format it was in, method, target and status."""

    format: str  # "combined", "common" or "uwsgi"
    method: str
    target: str  # /path?query, as sent
    status: int


@dataclass(frozen=True)
class LogRoute:
    """One route of the log: its shape, the request that stands for it, and how many asked."""

    shape: str  # `GET /orders/{id}`
    method: str
    target: str  # the most frequent concrete request of the shape
    requests: int

    def mix_route(self) -> MixRoute:
        label = self.target if self.method == "GET" else f"{self.method} {self.target}"
        return MixRoute(label, self.method, self.target, float(self.requests))


@dataclass(frozen=True)
class LogMix:
    """The log's mix: the top routes, and every other line counted under its reason."""

    path: str
    lines: int
    routes: tuple[LogRoute, ...]  # most requested first
    left_out: dict[str, int] = field(default_factory=dict)  # REASONS key -> lines
    formats: dict[str, int] = field(default_factory=dict)  # format -> lines that parsed

    @property
    def kept(self) -> int:
        return sum(r.requests for r in self.routes)

    def mix(self) -> tuple[MixRoute, ...]:
        return tuple(r.mix_route() for r in self.routes)


def parse_line(text: str) -> Line | None:
    """One line in any of the formats read; None when it is none of them."""
    if match := _COMMON.search(text):
        parts = match["request"].split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            return None
        kind = "combined" if match["combined"] else "common"
        method, target, status = parts[0], parts[1], int(match["status"])
    elif match := _UWSGI.search(text):
        kind, method, target, status = "uwsgi", match["method"], match["target"], int(match[3])
    else:
        return None
    target = _origin_form(target)
    if not _METHOD.match(method) or target is None:
        return None
    return Line(kind, method, target, status)


def _origin_form(target: str) -> str | None:
    """`/path?query` as a server sees it (an absolute-form target loses its scheme and host);
    None for anything no route can be (`*`, control characters, a fragment)."""
    if target.startswith(("http://", "https://")):
        parts = urllib.parse.urlsplit(target)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    if not target.startswith("/") or "#" in target or any(ord(c) < 33 for c in target):
        return None
    return target


@functools.lru_cache(maxsize=65_536)
def path_of(target: str) -> str:
    """The target's path (a log asks for the same few targets over and over: once each)."""
    return urllib.parse.urlsplit(target).path


@functools.lru_cache(maxsize=65_536)
def shape(path: str) -> str:
    """The route's shape: each id-like segment (digits, a UUID, a long hex) becomes `{id}`."""
    return "/".join("{id}" if _ID.match(s) else s for s in path.split("/"))


def is_static(path: str) -> bool:
    lowered = path.lower()
    return lowered.startswith(STATIC_PREFIXES) or Path(lowered).suffix in STATIC_SUFFIXES


def reason(line: Line | None, allowed: frozenset[str], login_path: str = "") -> str | None:
    """Why a line is left out (a REASONS key), or None: it counts in the mix. A request to the
    login's path (`--login`), its form or its POST, is the login a user sends once."""
    if line is None:
        return "unparsed"
    if login_path and path_of(line.target) == login_path:
        return "login"
    if line.status >= 400:
        return "status"
    if line.method in CHANGES_DATA and line.method not in allowed:
        return "method"
    if line.method not in SENDABLE:
        return "unsendable"
    if is_static(path_of(line.target)):
        return "static"
    return None


def read_mix(
    lines: Iterable[bytes],
    path: str,
    top: int = TOP_ROUTES,
    allowed: Iterable[str] = (),
    login_path: str = "",
) -> LogMix:
    """Every line judged once: kept under its route's shape, or counted under its reason."""
    allow = frozenset(m.upper() for m in allowed)
    left: Counter[str] = Counter()
    formats: Counter[str] = Counter()
    shapes: Counter[tuple[str, str]] = Counter()
    targets: dict[tuple[str, str], Counter[str]] = {}
    count = 0
    for raw in lines:
        count += 1
        line = parse_line(raw.decode("utf-8", errors="replace").rstrip("\r\n"))
        if line is not None:
            formats[line.format] += 1
        if (why := reason(line, allow, login_path)) is not None:
            left[why] += 1
            continue
        assert line is not None
        key = (line.method, shape(path_of(line.target)))
        shapes[key] += 1
        targets.setdefault(key, Counter())[line.target] += 1
    ranked = shapes.most_common()
    routes = tuple(
        LogRoute(f"{method} {route}", method, targets[(method, route)].most_common(1)[0][0], n)
        for (method, route), n in ranked[:top]
    )
    if beyond := sum(n for _, n in ranked[top:]):
        left["beyond_top"] = beyond
    return LogMix(path, count, routes, dict(left), dict(formats))


def read_file(
    path: Path, top: int = TOP_ROUTES, allowed: Iterable[str] = (), login_path: str = ""
) -> LogMix:
    """An access log file (gzip-compressed if it ends in .gz); LabError if it cannot be read
    or leaves no route to load."""
    try:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rb") as file:
            found = read_mix(file, str(path), top, allowed, login_path)
    except (OSError, EOFError, zlib.error) as e:
        raise LabError(
            f"--access-log {path}: cannot read it ({getattr(e, 'strerror', None) or e})"
        ) from None
    if not found.routes:
        said = ", ".join(f"{n} {REASONS[k]}" for k, n in found.left_out.items()) or "it is empty"
        raise LabError(f"--access-log {path}: no route to load in {found.lines} lines ({said})")
    return found
