"""What `granian-long-io` measures: one declarative table of servers, each with its argv.

Three kinds of case:

- `published`: the harness's own argv for the "Long I/O" rows of Granian's benchmarks/vs.md (run
  5 August 2026), one worker, loaded like the harness: oha, 512 connections;
- `recommended`: the same routes with each server configured as its own docs recommend for a
  512-connection I/O-bound load (enough threads or greenlets for the connections, workers per
  core as documented), swept over connection levels;
- `variant`: uWSGI as published without the harness's primer and warm-up, which decides why its
  one thread answers far below its own ceiling in the published sequence;
- `may2025`: uWSGI as the page's 21 May 2025 version (commit 02f6839) ran it at 100 ms and 128
  connections, where it listed 16,474 RPS at 7.7 ms.

The harness binds port 8000 on every address; here each server binds 127.0.0.1 on a free port (the
lab loads loopback only). Nothing else in a published argv is changed.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

APP = "experiments.granian_long_io.app"


@dataclass(frozen=True)
class Protocol:
    """How long each run lasts and what is run: the harness's seconds by default."""

    bench_s: float = 10.0  # the harness's measured run
    primer_s: float = 4.0  # at primer_c connections
    primer_c: int = 8
    warmup_s: float = 3.0  # at the test's connections
    pauses_s: tuple[float, float, float] = (1.0, 2.0, 3.0)  # after primer, warm-up, run
    connections: int = 512
    levels: tuple[int, ...] = (64, 512)  # the recommended configurations' sweep
    recommended: bool = True
    may2025: bool = True
    variants: bool = True
    only: tuple[str, ...] = ()  # server names to run (tests); () = all


APP_FILE = Path(__file__).with_name("app.py")


@dataclass(frozen=True)
class Server:
    """One server configuration: its argv template ({bin}, {port}, {wsgi}, {asgi}, {cores},
    {workers}) and what bounds the requests it can hold at once."""

    name: str
    key: str  # the published figures' key in granian_long_io.toml ("" for none)
    argv: tuple[str, ...]
    processes: str = "1"  # a number, or "cores" / "2*cores+1": resolved on this machine
    threads: int = 0  # requests one process holds at once when they block (0: not thread-bound)
    note: str = ""  # what differs from the published configuration, or what is missing here


@dataclass(frozen=True)
class Case:
    """One server loaded at one wait and one connection level."""

    kind: str  # "published" | "recommended" | "may2025" | "variant"
    server: Server
    route: str  # "/io10" | "/io100"
    connections: int
    warm: bool = True  # run the harness's primer and warm-up before the measured run

    @property
    def sleep_s(self) -> float:
        return 0.010 if self.route == "/io10" else 0.100

    @property
    def label(self) -> str:
        cold = "" if self.warm else ", no primer or warm-up"
        return f"{self.server.name}, {self.sleep_s * 1000:g} ms, c{self.connections}{cold}"


GRANIAN = ("{bin}/granian", "--log-level", "warning", "--backlog", "2048", "--no-ws")
GRANIAN_AT = ("--host", "127.0.0.1", "--port", "{port}", "--http", "1")
ASYNC = ("--loop", "uvloop", "--task-impl", "asyncio")
UVICORN = ("{bin}/uvicorn", "--interface", "asgi3", "--no-access-log", "--log-level", "warning")
UWSGI = ("{bin}/uwsgi", "--http", "127.0.0.1:{port}", "--master", "--enable-threads")
UWSGI_TAIL = ("--disable-logging", "--die-on-term", "--single-interpreter", "--lazy-apps")
UWSGI_APP = ("--wsgi-file", str(APP_FILE), "--callable", "wsgi_app")
GUNICORN = ("{bin}/gunicorn", "--bind", "127.0.0.1:{port}")

PUBLISHED = (
    Server(
        "Granian WSGI",
        "granian_wsgi",
        (*GRANIAN, "--interface", "wsgi", *GRANIAN_AT, "--workers", "1", "--runtime-threads", "1")
        + ("--runtime-mode", "mt", "{wsgi}"),
    ),
    Server(
        "Granian ASGI",
        "granian_asgi",
        (*GRANIAN, "--interface", "asgi", *GRANIAN_AT, *ASYNC, "--workers", "1")
        + ("--runtime-threads", "1", "--runtime-mode", "st", "{asgi}"),
    ),
    Server(
        "uvicorn httptools",
        "uvicorn_httptools",
        (
            *UVICORN,
            "--http",
            "httptools",
            "--workers",
            "1",
            "--host",
            "127.0.0.1",
            "--port",
            "{port}",
            "{asgi}",
        ),
    ),
    Server(
        "gunicorn ASGI (-k asgi)",
        "gunicorn_asgi",
        (*GUNICORN, "--workers", "1", "-k", "asgi", "{asgi}"),
        note="argv as the harness's other gunicorn rows: its version with this row is not in "
        "the lab's copy",
    ),
    Server(
        "gunicorn gevent",
        "gunicorn_gevent",
        (*GUNICORN, "--workers", "1", "-k", "gevent", "{wsgi}"),
    ),
    Server(
        "uWSGI",
        "uwsgi",
        (*UWSGI, "--processes", "1", *UWSGI_TAIL, *UWSGI_APP),
        threads=1,
        note="no --threads: one thread in one process",
    ),
)

# As each server's docs recommend for many slow requests: Granian, uvicorn and uWSGI a process per
# core, gunicorn (2 x cores) + 1 workers (its design page); threads (Granian WSGI's blocking
# threads, uWSGI's --threads) enough for the connections between them; gevent and asyncio hold a
# connection per greenlet or task (gunicorn's --worker-connections defaults to 1000). uWSGI's
# listen queue (100 by default) raised to hold the connections, as its docs advise under load.
PER = "{per_process}"  # ceil(connections / processes): threads enough for the connections
RECOMMENDED = (
    Server(
        "Granian WSGI",
        "",
        (*GRANIAN, "--interface", "wsgi", *GRANIAN_AT, "--workers", "{processes}")
        + ("--blocking-threads", PER, "{wsgi}"),
        processes="cores",
        threads=-1,
        note="--workers per core, --blocking-threads for the connections",
    ),
    Server(
        "Granian ASGI",
        "",
        (
            *GRANIAN,
            "--interface",
            "asgi",
            *GRANIAN_AT,
            *ASYNC,
            "--workers",
            "{processes}",
            "{asgi}",
        ),
        processes="cores",
        note="--workers per core",
    ),
    Server(
        "uvicorn httptools",
        "",
        (
            *UVICORN,
            "--http",
            "httptools",
            "--workers",
            "{processes}",
            "--host",
            "127.0.0.1",
            "--port",
            "{port}",
            "{asgi}",
        ),
        processes="cores",
        note="--workers per core",
    ),
    Server(
        "gunicorn ASGI (-k asgi)",
        "",
        (*GUNICORN, "--workers", "{processes}", "-k", "asgi", "{asgi}"),
        processes="2*cores+1",
        note="(2 x cores) + 1 workers",
    ),
    Server(
        "gunicorn gevent",
        "",
        (*GUNICORN, "--workers", "{processes}", "-k", "gevent", "--worker-connections", "1000")
        + ("{wsgi}",),
        processes="2*cores+1",
        note="(2 x cores) + 1 workers, 1000 greenlets each",
    ),
    Server(
        "uWSGI",
        "",
        (*UWSGI, "--processes", "{processes}", "--threads", PER, "--listen", "1024")
        + (*UWSGI_TAIL, *UWSGI_APP),
        processes="cores",
        threads=-1,
        note="a process per core, --threads for the connections, --listen 1024",
    ),
)
MAY_2025 = Server(
    "uWSGI (May 2025 row)",
    "may2025_uwsgi",
    PUBLISHED[-1].argv,
    threads=1,
    note="the same argv at 128 connections, the level the May 2025 page listed",
)


def processes(server: Server, cores: int | None = None) -> int:
    """The server's process count on this machine ("cores", "2*cores+1" or a number)."""
    n = cores or os.cpu_count() or 1
    return {"cores": n, "2*cores+1": 2 * n + 1}.get(server.processes) or int(server.processes)


def threads(case: Case, cores: int | None = None) -> int:
    """Requests one process can hold while they block: 0 where threads do not bound it."""
    per = -(-case.connections // processes(case.server, cores))
    return per if case.server.threads == -1 else case.server.threads


def argv(case: Case, port: int) -> list[str]:
    """The case's command line on this machine."""
    values = {
        "bin": str(Path(sys.executable).parent),
        "port": str(port),
        "wsgi": f"{APP}:wsgi_app",
        "asgi": f"{APP}:asgi_app",
        "processes": str(processes(case.server)),
        "per_process": str(threads(case) or 1),
    }
    return [a.format(**values) for a in case.server.argv]


def published_cases(connections: int = 512) -> tuple[Case, ...]:
    return tuple(
        Case("published", s, route, connections) for s in PUBLISHED for route in ("/io10", "/io100")
    )


def recommended_cases(levels: tuple[int, ...]) -> tuple[Case, ...]:
    return tuple(
        Case("recommended", s, route, c)
        for s in RECOMMENDED
        for route in ("/io10", "/io100")
        for c in levels
    )


MAY_2025_CASE = Case("may2025", MAY_2025, "/io100", 128)


def variant_cases(connections: int = 512) -> tuple[Case, ...]:
    """uWSGI as published without the primer and the warm-up: what its one thread answers when
    no request cut off by an earlier run is still waiting for it."""
    return tuple(
        Case("variant", PUBLISHED[-1], r, connections, warm=False) for r in ("/io10", "/io100")
    )
