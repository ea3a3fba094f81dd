"""What a model's knobs and the machine allow a step, and what one request cost.

One notion of the server's cores: `server_cores` is used by the verdict (through `Capacity`) and
by the analysis's CPU ceiling (`analysis.metrics`), so a step judged CPU-bound and its ceiling use
the same count.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import psutil

from lab.config.models import Knobs, Model
from lab.record.step import StepRecord
from lab.record.thresholds import T

MB = 1024 * 1024


def server_cores(given: int, processes: int | None, observed_cpu_pct: float = 0.0) -> float:
    """Cores one model's server has and uses: the cores given to it (0: every core this process
    may use), at most one per process (a CPython process under the GIL computes on one), unless
    it was seen to use more (uWSGI's C threads reached 123% of a core in one process)."""
    usable = given or len(os.sched_getaffinity(0))
    if processes is None:
        return float(usable)
    return float(min(usable, max(processes, observed_cpu_pct / 100)))


@dataclass(frozen=True)
class Capacity:
    """What the model's knobs allow, to judge a step against."""

    requests: int  # simultaneous requests the knobs allow (processes x concurrency)
    knob: str  # the same in words, e.g. "50 threads x 1 process"
    cores: float  # cores the server can use (`server_cores`)
    delay_ms: float  # the upstream's mean delay: the closed-loop ideal is users / delay
    memory_mb: float  # the machine's memory
    idle_rss_mb: float = 0.0  # the server's RSS before any load (0: unknown)
    processes: int = 1
    probe_cap: float | None = None  # the probe's overlap where it found a cap below its K
    host_cores: int = 0  # the machine's cores (0: unknown), to tell a full host
    front_workers: int = 0  # nginx workers in front, on the server's cores (0: no front)

    @classmethod
    def of(
        cls,
        model: Model,
        knobs: Knobs,
        cores_given: int,
        delay_ms: float,
        idle_rss_mb: float,
        probe_cap: float | None = None,
    ) -> Capacity:
        processes = int(knobs.processes)
        per = "" if model.unit == "process" else f"{knobs.concurrency} {model.unit}s x "
        return cls(
            requests=model.capacity(knobs),
            knob=f"{per}{processes} process{'es' if processes > 1 else ''}",
            cores=server_cores(cores_given, processes),
            delay_ms=delay_ms,
            memory_mb=psutil.virtual_memory().total / MB,
            idle_rss_mb=idle_rss_mb,
            processes=processes,
            probe_cap=probe_cap,
            host_cores=psutil.cpu_count() or 0,
        )


@dataclass(frozen=True)
class Cost:
    """What one request cost, from the step's means (None where it cannot be known)."""

    server_cpu_ms_per_req: float | None
    apparatus_cpu_ms_per_req: float | None  # load generator + upstream
    server_rss_kb_per_conn: float | None  # RSS above the idle server, per open connection
    front_cpu_ms_per_req: float | None = None  # nginx in front (None: no front)
    # each database the lab started for the app, by kind ({}: none)
    database_cpu_ms_per_req: dict[str, float] = field(default_factory=dict)


def cost(r: StepRecord, cap: Capacity, connections: float) -> Cost:
    """The step's cost per request; `connections`: requests held open at once (users, or the
    upstream's in-flight count in open loop)."""
    per_req = r.ms_per_request(1.0)  # % of a core -> ms per request
    if per_req is None:
        return Cost(None, None, None)
    kb = None
    if cap.idle_rss_mb > 0 and r.resources.server_rss_mb > 0 and connections > 0:
        kb = round(max(r.resources.server_rss_mb - cap.idle_rss_mb, 0.0) * 1024 / connections, 1)
    apparatus = (r.resources.client_cpu_pct + r.resources.upstream_cpu_pct) * per_req
    front = (
        round(r.resources.front_cpu_pct * per_req, 3) if r.resources.front_cpu_pct >= 0 else None
    )
    dbs = {kind: round(pct * per_req, 3) for kind, pct in r.resources.database_cpu_pct.items()}
    return Cost(round(r.resources.server_cpu_pct * per_req, 3), round(apparatus, 3), kb, front, dbs)


def apparatus_ceiling(ms_per_req: float, cores: int, delay_ms: float) -> float:
    """The users at which the apparatus (generators and upstream, on `cores` cores) would be
    saturated, at the closed-loop ideal (users / delay), from its CPU per request at lower
    levels: its cores full to the apparatus rule's threshold. A model that closes a connection
    per request costs the apparatus more per request, so its ceiling is lower. inf where the
    cost or the delay is unknown."""
    if delay_ms <= 0:
        return float("inf")
    return apparatus_rate(ms_per_req, cores) * delay_ms / 1000


def asked_rate(users: int, delay_ms: float, last_rps: float, last_users: int) -> float:
    """The requests a second a closed-loop level of `users` will ask of the apparatus, forecast
    from the level below (`last_rps` at `last_users`): at most the ideal (users / delay), and at
    most that level's throughput scaled by the users (a model its own limit holds at 28 req/s
    does not ask for the ideal's 600 at four times the users; it asks for at most 112)."""
    ideal = users * 1000 / delay_ms if delay_ms > 0 else float("inf")
    return min(ideal, last_rps * users / max(last_users, 1))


def apparatus_rate(ms_per_req: float, cores: int) -> float:
    """The requests a second at which the apparatus's cores are full to the apparatus rule's
    threshold, at `ms_per_req` of its CPU per request (inf where unknown). A model its own
    limit holds below this rate never fills the apparatus, however many users it is given."""
    if ms_per_req <= 0 or cores <= 0:
        return float("inf")
    return cores * (T.apparatus_core_busy_pct / 100) * 1000 / ms_per_req
