"""The step record: what one model measured at one point of a sweep, built in one place.

`step_record` is the only constructor of a `StepRecord` from measurements: sweeps, interrupted
steps, models that could not start, experiments and test fixtures all go through it, so a field
added here reaches every writer at once. `lab.record.stepjson.from_json` reads every schema the lab
ever wrote.

Schema 2 names what a step's load was: `users` in closed loop, `rate_rps` and `max_outstanding`
in open loop. Schema 1 (before 2026-11) had one `concurrency` field meaning users in closed loop
and the cap on outstanding requests in open loop; it is read into the new names.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from lab.record import counted
from lab.record import flags as flag_registry
from lab.record.window import Measured, Sampled

__all__ = ["Measured", "Sampled", "StepKey", "StepRecord", "Raised", "step_record"]
NOTHING_SAMPLED = Sampled()  # a step nothing was sampled around (skipped, or not started)

SCHEMA_VERSION = 2
READABLE_SCHEMAS = (1, 2)
# `dropped` is open loop only: a request due while the cap on outstanding requests was full.
ERROR_KINDS = (
    "refused",
    "reset",
    "timeout",
    "http_5xx",
    "http_4xx",
    "bad_body",
    "other",
    "dropped",
)
STATUSES = ("measured", "partial", "skipped")


def level_label(users: float | None, rate_rps: float | None = None) -> str:
    """A load level in words: "10 users" (closed loop) or "300 req/s" (open loop). Users, not
    "concurrency": that word is the per-process knob."""
    if rate_rps is not None:
        return f"{rate_rps:g} req/s"
    return f"{users or 0:g} user{'' if users == 1 else 's'}"


@dataclass(frozen=True)
class StepKey:
    """What identifies a step: model, mode, the point's load and the trial."""

    model: str
    mode: str  # "closed" (users, no think time) or "open" (arrival rate)
    users: int | None  # closed loop
    rate_rps: float | None  # open loop
    trial: int

    @property
    def label(self) -> str:
        return level_label(self.users, self.rate_rps)

    @property
    def level(self) -> float:
        """The point's position on a sweep's axis: users, or the arrival rate."""
        return float(self.rate_rps if self.rate_rps is not None else self.users or 0)


@dataclass(frozen=True)
class Raised:
    """A flag raised on a step, with the evidence that explains it."""

    flag: str
    evidence: Any = None

    def __post_init__(self) -> None:
        flag_registry.declared(self.flag)  # an undeclared flag is a bug: fail where it is raised


OPEN_LOOP_COUNTS = ("scheduled", "sent", "completed", "unfinished", "not_sent")


@dataclass(frozen=True)
class StepRecord:
    """One step, as written to `steps.jsonl` (one JSON object per line)."""

    run_id: str
    model: str
    mode: str
    users: int | None
    rate_rps: float | None
    max_outstanding: int | None
    trial: int
    status: str  # measured | partial (interrupted) | skipped (nothing measured; flags say why)
    started_at: str  # ISO 8601 UTC, start of the measured window
    duration_s: float  # the measured window, warm-up and settle excluded
    requests: int
    ok: int
    errors: dict[str, int]  # kind -> count, kinds from ERROR_KINDS
    throughput_rps: float  # ok responses per second of the measured window
    latency_ms: dict[str, float]  # p50, p90, p99, p999, max, mean of successful requests
    server_cpu_pct: float  # mean over the window, whole process tree, 100 = one core
    server_rss_mb: float  # peak over the window, RSS summed over the process tree
    client_cpu_pct: float  # mean over the window, the load generator, 100 = one core
    upstream_cpu_pct: float
    host_cpu_pct: float  # whole machine, 100 = one core
    upstream_max_inflight: int  # highest concurrency the upstream saw (-1: unknown)
    flags: tuple[str, ...]
    histogram: str  # the `.hlog`, relative to the run directory ("" when none)
    timeseries: dict[str, list[float]]
    evidence: dict[str, Any]
    schema_version: int = SCHEMA_VERSION
    # Added within schema 2, with defaults so that older schema-2 lines still load.
    upstream_lag_ms: float = -1.0  # mean lateness of the upstream's event loop (-1: unknown)
    upstream_lag_max_ms: float = -1.0
    limited_by: str = ""  # a key of lab.verdict.limits.LIMITS ("" when not assessed)
    limit_reason: str = ""  # the limit in plain words, with its figures
    server_cpu_ms_per_req: float | None = None
    apparatus_cpu_ms_per_req: float | None = None  # load generator + upstream
    server_rss_kb_per_conn: float | None = None  # RSS above the idle server per connection
    apparatus_core_pct: float = 0.0  # mean busy % of the busiest core the apparatus ran on
    host_softirq_pct: float = 0.0  # kernel softirq (network) work, % of one core
    apparatus_wait_pct: float = 0.0  # generator + upstream: runnable but waiting for a CPU, %
    # Requests inside the server by Little's law: throughput x the unloaded service time (-1:
    # unknown). Seen from outside, so it holds for any app, not only one that calls the upstream.
    inferred_inflight: float = -1.0
    # Open loop: arrivals due in the window, and what became of them.
    scheduled: int | None = None
    sent: int | None = None
    completed: int | None = None
    unfinished: int | None = None  # still unanswered at the cut-off (closed loop too): a bound
    not_sent: int | None = None  # due while the cap on outstanding requests was full
    latency_lower_bounds: tuple[str, ...] = ()  # latency_ms keys that are lower bounds (>=)
    generators: int = 1  # load-generator processes that produced the load (each one's in evidence)
    # The instrument measured like the server: how late the generators' event loops woke (p50,
    # p99, max, mean over the window, every load-carrying process merged; {}: unknown) and the
    # busiest one's share of the window in its own periodic work (-1: unknown).
    generator_lag_ms: dict[str, float] = field(default_factory=dict)
    generator_periodic_pct: float = -1.0
    # Requests the upstream answered in the window (-1: unknown): its in-flight counter says
    # something about the server only where the step's load went through it.
    upstream_served: int = -1
    # TCP connections to the server's port closed in the window, and the sockets in TIME_WAIT on
    # it at the end (-1: unknown): a server that closes each connection makes every request pay a
    # connect and a close, in the generators and the kernel.
    server_connections: int = -1
    server_time_wait: int = -1
    # Every request counted (`lab.record.counted`): latency over every request (answers,
    # failures, and dropped and unfinished ones' lower bounds; {}: not recorded), failures' by
    # kind, the share of requests that are not answers (-1: unknown) and the percentiles it
    # can set on its own (never compared on those: `failed_tail`).
    latency_all_ms: dict[str, float] = field(default_factory=dict)
    latency_all_lower_bounds: tuple[str, ...] = ()
    failed_latency_ms: dict[str, dict[str, float]] = field(default_factory=dict)
    unanswered_share: float = -1.0
    unanswered_hides: tuple[str, ...] = ()
    # The instrument's error per request: for p99, p999 and max, the share of requests a
    # generator stall (or, open loop, a late send) at least that percentile's error budget long
    # touched ({}: unknown), and the percentiles it could move (`generator_lag`: p99).
    generator_touched: dict[str, float] = field(default_factory=dict)
    generator_moved: tuple[str, ...] = ()
    send_lateness_ms: dict[str, float] = field(default_factory=dict)  # open loop: send - intended
    # Peak memory of the server's process tree as the kernel accounts it, each page once (PSS
    # summed; a container's cgroup count; 0: unknown). Summed RSS counts the pages a forked
    # master shares with its workers once per process: models are compared on this instead.
    server_pss_mb: float = 0.0
    # The verdict's rule table (lab.verdict): the rule that named the limit, its advice, the
    # limits of the later rules that also fired (secondary evidence: `evidence.also_limited_by`),
    # the cores the server could use as judged, and how long its processes waited for a CPU
    # (the most any of them waited, % of the window: a disturbance where it was not CPU-bound).
    limit_rule: str = ""
    limit_advice: str = ""
    also_limited_by: tuple[str, ...] = ()
    server_cores: float = 0.0
    server_wait_pct: float = 0.0
    server_cores_busy_pct: float = -1.0  # its own cores busy, summed (-1: not pinned apart)
    # nginx in front of the server (`lab run --front nginx`), measured apart from it: its CPU
    # (mean, 100 = one core), its peak RSS and its CPU per request (-1, None: no front).
    front_cpu_pct: float = -1.0
    front_rss_mb: float = -1.0
    front_cpu_ms_per_req: float | None = None
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
    def key(self) -> StepKey:
        return StepKey(self.model, self.mode, self.users, self.rate_rps, self.trial)

    @property
    def is_trial(self) -> bool:
        """A trial of its point: something was measured. A skipped step records only why not
        (its flags); its zero throughput and empty latencies are no measurement, so no mean,
        spread or count of trials may take them in."""
        return self.status != "skipped"

    def ms_per_request(self, cpu_pct: float) -> float | None:
        """A mean CPU over the window (100 = one core) as CPU ms per request answered or
        failed (None: nothing counted): the one conversion every cost per request uses."""
        if self.requests <= 0 or self.duration_s <= 0:
            return None
        return cpu_pct * self.duration_s * 10 / self.requests

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

    @property
    def outage_seconds(self) -> tuple[int, ...]:
        return outage_seconds(self.flags, self.evidence)

    @property
    def excluded_by(self) -> list[str]:
        """The flags that keep this step out of the verdict."""
        return flag_registry.excluding(self.flags)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


def outage_seconds(flags: Sequence[str], evidence: Mapping[str, Any]) -> tuple[int, ...]:
    """The measured seconds (0-based) of an outage the verdict found (flag `stalled`): the
    event, not noise, so an interval from the per-second series leaves them out."""
    ev = evidence.get("stalled") if "stalled" in flags else None
    return tuple(int(i) for i in ev.get("seconds", ())) if isinstance(ev, dict) else ()


def step_record(
    run_id: str,
    key: StepKey,
    measured: Measured,
    sampled: Sampled = NOTHING_SAMPLED,
    raised: tuple[Raised, ...] = (),
    *,
    max_outstanding: int | None = None,
    histogram: str = "",
    status: str = "measured",
    context: Mapping[str, Any] | None = None,
    generators: int = 1,
) -> StepRecord:
    """The step record of what was measured: errors and no-response flags follow from the
    figures; the rest are raised by the caller with their evidence. `context`: facts a reader
    needs beside the flags' evidence (e.g. an experiment's case). What limited the step and what
    a request cost are added by `lab.verdict.assess.assessed`, which knows what the knobs allow."""
    open_loop = dict(measured.open_loop or {})
    cut = open_loop or dict(measured.closed_loop)  # the loop's figures at the window's cut-off
    errors, derived = _from_figures(measured, status)
    dropped = int(open_loop.get("dropped") or 0)
    counts = counted.facts(
        (measured.requests, measured.ok, dropped),
        measured.latency_ms,
        measured.all_latency_ms,
        measured.failed_latency_ms,
        (measured.generator_lag, measured.late_sends),
        cut,
    )
    everything = (*raised, *derived)
    names = tuple(dict.fromkeys(r.flag for r in everything))
    evidence = _evidence(everything, context, measured.open_loop)
    duration = measured.duration_s
    in_window = cut.get("ok_in_window", measured.ok)  # answered in the window, whenever sent
    return StepRecord(
        run_id=run_id,
        **asdict(key),
        max_outstanding=max_outstanding,
        status=status,
        started_at=measured.started_at,
        duration_s=duration,
        requests=measured.requests,
        ok=measured.ok,
        errors=errors,
        throughput_rps=round(in_window / duration, 2) if duration > 0 else 0.0,
        latency_ms=dict(measured.latency_ms),
        client_cpu_pct=measured.client_cpu_pct,
        flags=names,
        histogram=histogram if measured.ok else "",
        timeseries={**measured.timeseries, **sampled.timeseries},
        evidence=evidence,
        generators=generators,
        generator_lag_ms=dict(measured.generator_lag_ms),
        generator_periodic_pct=measured.generator_periodic_pct,
        **_answers(measured),
        **_sampled_figures(sampled),
        **_open_loop_fields(cut),
        **counts,
    )


def _answers(measured: Measured) -> dict[str, Any]:
    """The answers by route, by when they arrived and by latency, as the record keeps them."""
    return {
        "routes": {k: dict(v) for k, v in measured.routes.items()},
        "answers_100ms": tuple(measured.answers_100ms),
        "answers_by_latency": tuple(measured.answers_by_latency),
    }


def _sampled_figures(sampled: Sampled) -> dict[str, Any]:
    """Every figure of `Sampled` that the record keeps under the same name, so that a figure
    added to both reaches every step; its series join the generator's in `timeseries`."""
    kept = {f.name for f in fields(StepRecord)} - {"timeseries"}
    return {f.name: getattr(sampled, f.name) for f in fields(Sampled) if f.name in kept}


def _from_figures(measured: Measured, status: str) -> tuple[dict[str, int], list[Raised]]:
    """Errors by kind (open loop: requests never sent count as `dropped`) and the flags that
    follow from the figures alone."""
    dropped = (measured.open_loop or {}).get("dropped")
    errors = {k: int(v) for k, v in {**measured.errors, "dropped": dropped}.items() if v}
    derived = [Raised("errors", errors)] if errors else []
    if not measured.ok and status == "measured":
        derived.append(Raised("no_responses"))
    return errors, derived


def _evidence(
    raised: tuple[Raised, ...], context: Mapping[str, Any] | None, open_loop: Any
) -> dict[str, Any]:
    """The caller's context, each flag's evidence and the open-loop figures."""
    evidence = dict(context or {})
    evidence |= {r.flag: r.evidence for r in raised if r.evidence not in (None, {}, "")}
    if open_loop is not None:
        evidence["open_loop"] = dict(open_loop)
    return evidence


def _open_loop_fields(open_loop: dict[str, Any]) -> dict[str, Any]:
    """The loop's counts at the cut-off (open loop: every one; closed: `unfinished`) and which
    percentiles are lower bounds."""
    counts = {k: open_loop[k] for k in OPEN_LOOP_COUNTS if k in open_loop}
    return {"latency_lower_bounds": tuple(open_loop.get("lower_bounds", ())), **counts}
