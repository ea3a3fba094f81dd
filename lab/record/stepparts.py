"""The four parts of a step record's figures: the load, the latency, the resources, the evidence.

A step record (`lab.record.step.StepRecord`) is its key and window (model, load, trial, when,
how long) and these four parts, each a frozen record of its own, so that a reader looking for a
figure knows where it lives: what was sent and what came back (`Load`), how long the answers
took (`Latency`), what the server and the apparatus spent (`Resources`), and the judgement with
what it rests on (`Evidence`: the flags and their details, the limit the rule table named, the
instrument's own health). Fields a part gained after it was first written have defaults, so that
every older line still loads (`lab.record.stepjson`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lab.record import flags as flag_registry

__all__ = ["Evidence", "Latency", "Load", "Resources", "PARTS", "outage_seconds"]


@dataclass(frozen=True)
class Load:
    """What the generators sent and what came back, and the connections it took."""

    requests: int
    ok: int
    errors: dict[str, int]  # kind -> count, kinds from `lab.record.step.ERROR_KINDS`
    throughput_rps: float  # ok responses per second of the measured window
    upstream_max_inflight: int  # highest concurrency the upstream saw (-1: unknown)
    generators: int = 1  # load-generator processes that produced the load (each one's in evidence)
    # Open loop: arrivals due in the window, and what became of them.
    scheduled: int | None = None
    sent: int | None = None
    completed: int | None = None
    unfinished: int | None = None  # still unanswered at the cut-off (closed loop too): a bound
    not_sent: int | None = None  # due while the cap on outstanding requests was full
    # Requests inside the server by Little's law: throughput x the unloaded service time (-1:
    # unknown). Seen from outside, so it holds for any app, not only one that calls the upstream.
    inferred_inflight: float = -1.0
    # Requests the upstream answered in the window (-1: unknown): its in-flight counter says
    # something about the server only where the step's load went through it.
    upstream_served: int = -1
    # TCP connections to the server's port closed in the window, and the sockets in TIME_WAIT on
    # it at the end (-1: unknown): a server that closes each connection makes every request pay a
    # connect and a close, in the generators and the kernel.
    server_connections: int = -1
    server_time_wait: int = -1
    # Connections nginx opened and closed to an HTTP server behind it in the window (-1: no
    # front, or uWSGI over a unix socket): beyond its keepalive pool, each request pays a new one.
    front_server_connections: int = -1
    # A traffic mix (`lab run --app` with weighted routes or an access log): each route's
    # weight, share, counts and latency (p50 ... max of its answers; {}: none), read from its
    # own HdrHistogram (`histogram`, the interval tagged `tag`); {}: one route, the step's.
    routes: dict[str, dict[str, Any]] = field(default_factory=dict)
    # The mock upstream's calls in the window per route (`GET /delay`, `POST /v1/charges`): how
    # many, per request of the step, and their mean wait ({}: none, or unknown).
    upstream_calls: dict[str, dict[str, float]] = field(default_factory=dict)
    # A user's app: the most connections its server's processes held at once to each of the
    # lab's services (postgres, redis, upstream) during the step: its own pools ({}: not read).
    app_connections: dict[str, int] = field(default_factory=dict)
    # The window's answers per 100 ms by when they arrived, from either engine (() : not
    # recorded, an older record): a pause shorter than a second is seen here, not in `timeseries`.
    answers_100ms: tuple[int, ...] = ()
    # ... and by latency (`hist.coarse_ms`; (): not recorded): a pause's held requests show there.
    answers_by_latency: tuple[tuple[float, int], ...] = ()


@dataclass(frozen=True)
class Latency:
    """How long the answers took, and what every request counted says beside them."""

    latency_ms: dict[str, float]  # p50, p90, p99, p999, max, mean of successful requests
    latency_lower_bounds: tuple[str, ...] = ()  # latency_ms keys that are lower bounds (>=)
    # Every request counted (`lab.record.counted`): latency over every request (answers,
    # failures, and dropped and unfinished ones' lower bounds; {}: not recorded), failures' by
    # kind, the share of requests that are not answers (-1: unknown) and the percentiles it
    # can set on its own (never compared on those: `failed_tail`).
    latency_all_ms: dict[str, float] = field(default_factory=dict)
    latency_all_lower_bounds: tuple[str, ...] = ()
    failed_latency_ms: dict[str, dict[str, float]] = field(default_factory=dict)
    unanswered_share: float = -1.0
    unanswered_hides: tuple[str, ...] = ()
    send_lateness_ms: dict[str, float] = field(default_factory=dict)  # open loop: send - intended


@dataclass(frozen=True)
class Resources:
    """What the server, its front, its databases and the apparatus spent over the window."""

    server_cpu_pct: float  # mean over the window, whole process tree, 100 = one core
    server_rss_mb: float  # peak over the window, RSS summed over the process tree
    client_cpu_pct: float  # mean over the window, the load generator, 100 = one core
    upstream_cpu_pct: float
    host_cpu_pct: float  # whole machine, 100 = one core
    server_cpu_ms_per_req: float | None = None
    apparatus_cpu_ms_per_req: float | None = None  # load generator + upstream
    server_rss_kb_per_conn: float | None = None  # RSS above the idle server per connection
    apparatus_core_pct: float = 0.0  # mean busy % of the busiest core the apparatus ran on
    host_softirq_pct: float = 0.0  # kernel softirq (network) work, % of one core
    apparatus_wait_pct: float = 0.0  # generator + upstream: runnable but waiting for a CPU, %
    # Peak memory of the server's process tree as the kernel accounts it, each page once (PSS
    # summed; a container's cgroup count; 0: unknown). Summed RSS counts the pages a forked
    # master shares with its workers once per process: models are compared on this instead.
    server_pss_mb: float = 0.0
    # How long the server's processes waited for a CPU (the most any of them waited, % of the
    # window: a disturbance where it was not CPU-bound), and its own cores busy, summed (-1: not
    # pinned apart).
    server_wait_pct: float = 0.0
    server_cores_busy_pct: float = -1.0
    # nginx in front of the server (`lab run --front nginx`), measured apart from it: its CPU
    # (mean, 100 = one core), its peak RSS and its CPU per request (-1, None: no front).
    front_cpu_pct: float = -1.0
    front_rss_mb: float = -1.0
    front_cpu_ms_per_req: float | None = None
    # Processes outside the run that could run on the server's cores and used 10% of a core or
    # more in the window, busiest first: "name (pid)" -> % of one core (`HostMeter.others`).
    others_on_cores: dict[str, float] = field(default_factory=dict)
    # The app's databases the lab started (`postgres`, `redis`): each one's CPU, mean over the
    # window of its whole process tree (100 = one core), and per request ({}: none started, or
    # an older record). They are the system under test as much as the server: a request that
    # queues in PostgreSQL waits there whatever the server's model.
    database_cpu_pct: dict[str, float] = field(default_factory=dict)
    database_cpu_ms_per_req: dict[str, float] = field(default_factory=dict)

    @property
    def deployed_cpu_ms_per_req(self) -> float | None:
        """CPU per request on the server's cores as deployed: the server's, plus nginx's where a
        front ran beside it on those cores (None: not measured). What sizing projects from."""
        if self.server_cpu_ms_per_req is None:
            return None
        return self.server_cpu_ms_per_req + (self.front_cpu_ms_per_req or 0.0)

    @property
    def deployed_cpu_pct(self) -> float:
        """The server's CPU plus its front's (100 = one core): how busy the server's cores were."""
        return self.server_cpu_pct + max(self.front_cpu_pct, 0.0)


@dataclass(frozen=True)
class Evidence:
    """The judgement of the step and what it rests on: the flags with their details, the limit
    the verdict's rule table (`lab.verdict`) named, and the apparatus's own health."""

    flags: tuple[str, ...]
    # Each flag's evidence, the caller's context (an experiment's case, the engine, a profile)
    # and the open-loop figures (`open_loop`).
    details: dict[str, Any]
    # The rule that named the limit, the limit and its reason in plain words with its figures
    # (a key of `lab.verdict.limits.LIMITS`; "": not assessed), its advice, the limits of the
    # later rules that also fired (secondary evidence: `details["also_limited_by"]`) and the
    # cores the server could use as judged.
    limited_by: str = ""
    limit_reason: str = ""
    limit_rule: str = ""
    limit_advice: str = ""
    also_limited_by: tuple[str, ...] = ()
    server_cores: float = 0.0
    upstream_lag_ms: float = -1.0  # mean lateness of the upstream's event loop (-1: unknown)
    upstream_lag_max_ms: float = -1.0
    # The instrument measured like the server: how late the generators' event loops woke (p50,
    # p99, max, mean over the window, every load-carrying process merged; {}: unknown) and the
    # busiest one's share of the window in its own periodic work (-1: unknown).
    generator_lag_ms: dict[str, float] = field(default_factory=dict)
    generator_periodic_pct: float = -1.0
    # The instrument's error per request: for p99, p999 and max, the share of requests a
    # generator stall (or, open loop, a late send) at least that percentile's error budget long
    # touched ({}: unknown), and the percentiles it could move (`generator_lag`: p99).
    generator_touched: dict[str, float] = field(default_factory=dict)
    generator_moved: tuple[str, ...] = ()

    @property
    def outage_seconds(self) -> tuple[int, ...]:
        return outage_seconds(self.flags, self.details)

    @property
    def excluded_by(self) -> list[str]:
        """The flags that keep this step out of the verdict."""
        return flag_registry.excluding(self.flags)


# The parts in the order a record lists them, each under the name it has in a `StepRecord`.
PARTS: dict[str, type] = {
    "load": Load,
    "latency": Latency,
    "resources": Resources,
    "evidence": Evidence,
}


def outage_seconds(flags: Sequence[str], details: Mapping[str, Any]) -> tuple[int, ...]:
    """The measured seconds (0-based) of an outage the verdict found (flag `stalled`): the
    event, not noise, so an interval from the per-second series leaves them out."""
    ev = details.get("stalled") if "stalled" in flags else None
    return tuple(int(i) for i in ev.get("seconds", ())) if isinstance(ev, dict) else ()
