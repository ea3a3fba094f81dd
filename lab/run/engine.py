"""Which engine sends a step's requests: oha where it can, the lab's own elsewhere.

Why oha by default: in open loop it sends on time in compiled code and times each request from
when it was due (`-q RATE --latency-correction`); held against it on the same server, the lab's
Python scheduler put the open loop's p99 15-26% above oha's (`benchmarks/latency_fidelity.py`).
In closed loop (`-c USERS`: each connection sends as soon as its answer arrived) it costs the
machine a fraction of the CPU per request of the lab's gevent users, which on a 2-core machine
were the first thing to run out (the apparatus rules excluded 3 to 5 of 7 models at 200 users).
Why the lab's own still: a step that needs what oha cannot do falls back to it, saying why in one
line: a weighted mix of routes with their own bodies and headers, or placeholders filled per
request (oha sends one fixed request), a login per user (oha keeps no cookies), Poisson arrivals
(oha spaces them evenly), fewer users than generator processes where some are remote, or oha
not installed. Generators on other machines (`lab generator --connect`) run their share on
their own oha and hand its records over after the window (`loadgen.oha.remote`). `--engine lab`
(or `engine = "lab"` in a scenario) asks for the lab's own everywhere.
Both engines speak the same protocol and fill the same record (`loadgen.oha`); the record names
the engine and its version, and where the lab's ran, why (`evidence.details.engine`).
"""

from __future__ import annotations

import functools
from dataclasses import replace
from typing import Any

import lab
from lab.config.scenario import ENGINES
from lab.record import placeholders
from lab.run.generators import Generators
from lab.system import tools
from loadgen.protocol import Done, Start

__all__ = ["ENGINES", "applied", "cannot", "evidence"]
# Arrivals one oha process (one thread, pinned to one core) sends on time with room to spare.
# Measured on the 2-core machine (shared, load average 3.5) against a trivial asyncio server
# (tests/shedding_server.py), 2 s windows: oha used 8-9% of its core at 1,000 req/s, 14% at
# 3,000 and 19-22% at 6,000, about 30 us of CPU per request past the first thousand, so its core
# would be full near 30,000 req/s. Past half of that a step splits over generator cores, each
# process near half of its core, as the lab's own generators are split (a heavier response or
# a slower core costs more per request).
OHA_RPS_PER_PROCESS = 15_000.0


@functools.cache
def oha_missing() -> str | None:
    """Why oha cannot run here (one line), once per process."""
    return tools.missing("oha")


@functools.cache
def oha_version() -> str:
    return tools.version("oha")


def cannot(start: Start) -> str | None:
    """Why oha cannot run this step (one line), or None."""
    if start.mix:
        return (
            f"a weighted mix of {len(start.mix)} routes, each with its own method, headers, body "
            "and placeholders: oha sends one fixed request"
        )
    if any(placeholders.found(t) for t in (start.path, start.body or "", *start.headers.values())):
        return "placeholders ({uuid}, {n}, ...) filled per request: oha sends one fixed request"
    if start.login is not None:
        return f"a login per user ({start.login.label}): oha keeps no session of its own"
    if start.rate_rps is not None and start.arrival != "constant":
        return f"{start.arrival} arrivals: oha's -q spaces requests evenly"
    cap = start.users if start.rate_rps is None else start.max_outstanding
    if start.remote_generators and cap < start.generators + start.remote_generators:
        return (
            f"{cap} {'users' if start.rate_rps is None else 'requests in flight'} over "
            f"{start.generators + start.remote_generators} generator processes: oha needs a "
            "connection in each"
        )
    return oha_missing()


def applied(start: Start, asked: str, fleet: Generators) -> Start:
    """The step's start on its engine: oha's path and its process count (open loop: one per
    OHA_RPS_PER_PROCESS req/s where automatic; closed loop: the run's generator processes, the
    users split over them as the lab's are) where oha runs it; unchanged otherwise."""
    if asked != "oha" or cannot(start) is not None:
        return replace(start, engine="lab", engine_path="")
    cap = start.max_outstanding if start.rate_rps is not None else start.users
    count = min(fleet.for_step(start.rate_rps, cap, OHA_RPS_PER_PROCESS), max(1, cap))
    path = tools.binary("oha") or ""
    return replace(start, engine="oha", engine_path=path, generators=count)


def evidence(asked: str, start: Start, done: Done | None = None) -> dict[str, Any]:
    """What the record says of its engine: its name and version (on oha: its processes here and
    on remote generators), and where a step that could have run on oha did not, why; in closed
    loop on oha, the window's reconnects (requests sent on a connection the server had closed
    after its last answer, as uWSGI's `--http-socket` does: never requests nor errors, each
    followed by a fresh connection)."""
    if start.engine != "oha":
        why = "asked for (--engine lab)" if asked == "lab" else cannot(start)
        return {"name": "lab", "version": f"concurrency-lab {lab.__version__}", "why": why}
    out: dict[str, Any] = {"name": "oha", "version": oha_version(), "processes": start.generators}
    if start.remote_generators:  # each runs one oha process of its own (`loadgen.oha.remote`)
        out["remote_processes"] = start.remote_generators
    if done is not None and done.closed_loop.get("reconnects"):
        out["reconnects"] = done.closed_loop["reconnects"]
    return out
