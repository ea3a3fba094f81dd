"""Where a server's time went: a step's sampled stacks (`lab.system.profile`) grouped by owner.

Every sample is counted once, by the frame it was taken in (its leaf: the code that held the CPU
or waited), and that frame's package names its owner: the app's code, the framework, the server
(its loop: the gevent hub, asyncio's), a driver, the interpreter and its standard library. The
threads of the wall recorder that were on no CPU are `idle`.

Under an event loop (gevent, asyncio) a request must never wait outside the loop: the loop's own
thread sampled waiting (in the wall recorder, not in the busy one) at a leaf that is not the
loop's own wait is a blocking call, and its caller is named with the share of the loop's window it
held (`blocking`). A handler that computes (a CPU-bound JSON body) is in both recorders and is not
blocking.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Mapping
from typing import Any

OWNERS = ("app", "framework", "server", "driver", "interpreter", "idle")
FRAMEWORKS = frozenset(
    [
        "flask",
        "werkzeug",
        "quart",
        "django",
        "jinja2",
        "markupsafe",
        "starlette",
        "fastapi",
        "pydantic",
        "itsdangerous",
        "click",
        "blinker",
    ]
)
SERVERS = frozenset(
    [
        "uwsgi",
        "gunicorn",
        "granian",
        "uvicorn",
        "hypercorn",
        "gevent",
        "greenlet",
        "asyncio",
        "uvloop",
        "selectors",
        "h11",
        "h2",
        "httptools",
        "wsproto",
        "waitress",
        "anyio",
        "sniffio",
        "socketserver",
        "wsgiref",
    ]
)
DRIVERS = frozenset(
    [
        "psycopg2",
        "psycopg",
        "psycogreen",
        "asyncpg",
        "redis",
        "urllib3",
        "aiohttp",
        "requests",
        "httpx",
        "httpcore",
        "sqlalchemy",
        "pymysql",
        "certifi",
        "idna",
        "charset_normalizer",
    ]
)
# The loop's own waits: a leaf in these packages is the loop idle, not a request blocking it.
LOOP_WAITS = frozenset(["gevent", "greenlet", "asyncio", "uvloop", "selectors"])
LOOPS = frozenset(["gevent", "asyncio", "uvloop"])
THREAD_ROOT = "(threading.py)"  # a thread the lab's loop does not run on (a pool, a timer)
DECIDING = ("server_cpu", "unknown")  # the limits whose reason says where the CPU went
BLOCKING_SHARE = 0.05  # of the loop's window: below it, the two recorders' noise
BLOCKING_MIN_SAMPLES = 20
# The app's own frame waiting: what it waits in is C, below every Python frame py-spy reads.
IN_C = "in a C call below it, a driver without its green patch (psycopg2: psycogreen) or a sleep"
HINTS = {
    "psycopg2": "psycogreen under gevent, psycopg's async API under asyncio",
    "redis": "redis.asyncio under asyncio, gevent's monkey patch under gevent",
    "requests": "an async client (httpx, aiohttp) or gevent's monkey patch",
    "urllib3": "an async client (httpx, aiohttp) or gevent's monkey patch",
}


def frames(stack: str) -> list[str]:
    """A collapsed stack's Python frames, root first (py-spy's `process ...` frames left out)."""
    return [f for f in stack.split(";") if f and not f.startswith("process ")]


def process_of(stack: str, full: bool = False) -> str:
    """The process a sample came from: `process PID` of its last `process PID:"argv"` frame (the
    whole frame where `full`), '' where none."""
    procs = [f for f in stack.split(";") if f.startswith("process ")]
    if not procs:
        return ""
    return procs[-1] if full else procs[-1].partition(":")[0]


def _path(frame: str) -> str:
    return frame.rpartition(" (")[2].rstrip(")").rsplit(":", 1)[0]


def package(frame: str) -> str:
    """A frame's top-level package: `connect (psycopg2/__init__.py)` -> `psycopg2`; a file py-spy
    left absolute (outside every import path) is named by its folder."""
    path = _path(frame)
    parts = path.split("/")
    if path.startswith("/"):
        return parts[-2] if len(parts) > 2 else parts[-1].removesuffix(".py")
    return parts[0].removesuffix(".py")


def owner(pkg: str) -> str:
    """The owner of a package's code."""
    if pkg in SERVERS:
        return "server"
    if pkg in FRAMEWORKS:
        return "framework"
    if pkg in DRIVERS:
        return "driver"
    if pkg in sys.stdlib_module_names or pkg.startswith("<"):
        return "interpreter"
    return "app"


def name(frame: str) -> str:
    """A frame as a dotted name: `connect (psycopg2/__init__.py)` -> `psycopg2.connect`."""
    func = frame.rpartition(" (")[0]
    module = _path(frame).removesuffix(".py").removesuffix("/__init__").replace("/", ".")
    if module.startswith("."):  # absolute: its folder and file
        module = ".".join(module.rsplit(".", 2)[-2:])
    return f"{module}.{func.rpartition('.')[2]}"


def leaf(stack: str) -> str:
    """The frame a sample was taken in; one in no Python frame (uWSGI's own C loop, Granian's
    Rust threads) is `<native> (PROGRAM)`, the process's program, so its owner is the server's."""
    found = frames(stack)
    if found:
        return found[-1]
    where = process_of(stack, full=True)
    return f"<native> ({program(where)})" if where else ""


def program(process_frame: str) -> str:
    """The program of a `process PID:"argv"` frame: its executable's name, or the script's where
    the executable is Python (`python .../bin/granian ...` -> `granian`)."""
    words = [w.rsplit("/", 1)[-1] for w in process_frame.partition(":")[2].strip('"').split(" ", 2)]
    return words[1] if words[0].startswith("python") and len(words) > 1 else words[0]


def by_package(stacks: Mapping[str, int]) -> Counter[str]:
    """Samples per package of their leaf frame: each sample counted once."""
    out: Counter[str] = Counter()
    for stack, n in stacks.items():
        out[package(leaf(stack)) or "<unknown>"] += n
    return out


def by_owner(busy: Mapping[str, int], wall_total: int) -> Counter[str]:
    """Samples per owner: the busy ones by their leaf's package, and `idle` the wall recorder's
    samples beyond the busy ones (the two recorders sample the same threads at the same rate)."""
    out: Counter[str] = Counter({o: 0 for o in OWNERS})
    for pkg, n in by_package(busy).items():
        out[owner(pkg)] += n
    out["idle"] = max(0, wall_total - sum(busy.values()))
    return out


def percent(counts: Mapping[str, int]) -> dict[str, float]:
    """Each count as a percentage of all, to 0.1 (the empty mapping where there are none)."""
    total = sum(counts.values())
    return {k: round(100 * n / total, 1) for k, n in counts.items()} if total else {}


def _loop_stacks(stacks: Mapping[str, int], loops: set[str]) -> Counter[str]:
    """The samples of the loop's own thread in the processes that run one, by leaf frame."""
    out: Counter[str] = Counter()
    for stack, n in stacks.items():
        found = frames(stack)
        if found and process_of(stack) in loops and not found[0].endswith(THREAD_ROOT):
            out[found[-1]] += n
    return out


def blocking(wall: Mapping[str, int], busy: Mapping[str, int]) -> list[dict[str, Any]]:
    """The calls that held an event loop's thread off the CPU outside the loop's own wait:
    each caller, its share of the loop's window (percent) and its samples, most first."""
    loops = {process_of(s) for s in wall if any(package(f) in LOOPS for f in frames(s))}
    if not loops:
        return []
    waited, ran = _loop_stacks(wall, loops), _loop_stacks(busy, loops)
    window = sum(waited.values())
    out = []
    for frame, n in waited.items():
        held = n - ran.get(frame, 0)
        if package(frame) in LOOP_WAITS or held < BLOCKING_MIN_SAMPLES:
            continue
        if held >= BLOCKING_SHARE * window:
            pct = round(100 * held / window, 1)
            out.append({"caller": name(frame), "share_pct": pct, "samples": held})
    return sorted(out, key=lambda b: -b["share_pct"])


def summary(wall: Mapping[str, int], busy: Mapping[str, int], top: int = 5) -> dict[str, Any]:
    """A step's profile as evidence: the owners' shares of the window, the busy samples' top
    packages (percent of the CPU samples, each with its owner) and the blocking calls."""
    wall_total, busy_total = sum(wall.values()), sum(busy.values())
    packages = percent(by_package(busy))
    ranked = sorted(packages.items(), key=lambda kv: (-kv[1], kv[0]))[:top]
    return {
        "samples": {"wall": wall_total, "busy": busy_total},
        "owners_pct": percent(by_owner(busy, wall_total)),
        "cpu_top": [{"package": p, "owner": owner(p), "pct": pct} for p, pct in ranked],
        "blocking": blocking(wall, busy),
    }


def said(profile: Mapping[str, Any] | None, limit: str, least_pct: float = 5.0) -> str:
    """Where the time went, in words, from a profile's evidence (the figures it keeps): the CPU's
    top packages where the limit is one of `DECIDING`, and every blocking call named; '' where
    there is nothing to say."""
    if not profile:
        return ""
    parts = []
    if limit in DECIDING and profile.get("cpu_top"):
        top = [
            f"{t['pct']:.0f}% in {t['package']} ({t['owner']})"
            for t in profile["cpu_top"][:3]
            if t["pct"] >= least_pct
        ]
        parts.append("where the server's CPU went: " + ", ".join(top))
    for b in profile.get("blocking") or ():
        pkg = b["caller"].split(".", 1)[0]
        hint = HINTS.get(pkg, IN_C if owner(pkg) == "app" else "")
        said = f"{b['caller']} blocks the loop {b['share_pct']:.0f}% of the window"
        parts.append(said + (f": {hint}" if hint else ""))
    return "; ".join(parts)
