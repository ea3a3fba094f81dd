"""What limits a step: the one resource that ran out, in plain words, and what a request cost.

A pure function of a step record and what the model's knobs allow (`Capacity`), so the verdict
can say *why* a model stops scaling, not only who won. The order of the checks is the order of
trust: a step whose apparatus or errors decided the figures says so before anything about the
server; a concurrency plateau is checked against the knobs, and a plateau the knobs do not
explain is raised as `capped_unexplained` (excluded from the verdict: something hidden limits the
model, so its figures are not the model's); one the knobs explain is raised as `capped` and is
simply the limit.

The requests in flight come from the lab's upstream where the step's load went through it (it
answered about as many requests as the step did), and otherwise from outside the server by
Little's law (throughput x the unloaded service time), so a pool inside a user's own app is seen
too, and a route that never calls the upstream (`/sleep`) is not read as a cap of 0. A server at
the CPU it can use raises no cap flag: its requests queue for the CPU, not for a pool. A step
below the ideal that nothing explains says so: it is never "no limit reached".
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, replace
from typing import Any

import psutil

from lab.config.models import Knobs, Model
from lab.front import limit as front_limit
from lab.record.step import Raised, StepRecord
from lab.run import apparatus

MB = 1024 * 1024
SATURATED = 0.90  # the server's CPU at this share of its usable cores: CPU-bound
TRACKS_IDEAL = 0.80  # throughput at this share of the ideal or more: nothing limits it
PLATEAU = 0.80  # in-flight at most this share of the offered concurrency: a plateau
QUEUEING = 1.2  # p50 at least this many upstream delays: requests wait somewhere
# ... with the in-flight count inferred from outside, a wider margin: overhead per request also
# lowers throughput x delay a little, while a full pool makes requests wait whole service times.
QUEUEING_INFERRED = 1.5
IDLE = 0.50  # the server's CPU under this share of its cores: it waits, it does not compute
UPSTREAM_SLOW = 1.5  # p50 this many delays with every request at the upstream: it is slow
ERRORS_LIMIT = 0.01  # this share of failed requests or more: errors decide the figures
MEMORY_LIMIT = 0.80  # the server's RSS at this share of the machine's memory
# The upstream answered at least this share of the step's answered requests: the load went
# through it, so its in-flight counter counts the server's requests.
THROUGH_UPSTREAM = 0.5

LIMITS: dict[str, str] = {
    "server_cpu": "the server's cores were busy: more concurrency cannot help, more cores or "
    "less CPU per request can",
    "concurrency_cap": "requests in flight plateaued below the offered load: a pool (threads, "
    "greenlets, connections) is full and the rest queue; the reason names the knob, or says "
    "that none explains it",
    "host_cpu": "the lab's apparatus ran out of CPU on a machine whose cores were all busy "
    "(server, apparatus and kernel together): more generators on it cannot help; generators on "
    "another machine can",
    "upstream": "the upstream answered slower than its configured delay, or went down: the "
    "model waits on it, not on itself",
    "apparatus": "the load generator or the upstream (the lab's own apparatus) ran out of CPU: "
    "the figures are the lab's limit, not the model's (where the server was at its CPU too, "
    "the step is `server_cpu`, both named)",
    "connections": "a new TCP connection per request: the server closes each connection after "
    "its response, so every request pays a connect, an accept and a close in the generators "
    "and the kernel; the apparatus ran out doing that, and more generators share the work "
    "without removing it",
    "front": "nginx in front of the server ran out (its CPU, its worker_connections, or its "
    "error log saying it could not reach the server): the front, not the model, set the figures",
    "errors": "failed requests (refused, reset, timeouts, 5xx) decided the figures",
    "memory": "the server's memory approached the machine's",
    "unknown": "throughput stayed under 80% of the ideal with no resource saturated and no cap "
    "found: the cause was not found (the reason gives the figures)",
    "none": "throughput tracks the ideal (users / delay, or the arrival rate): nothing ran out",
}
TITLES = {
    "server_cpu": "server CPU",
    "concurrency_cap": "a concurrency cap",
    "upstream": "the upstream",
    "apparatus": "the lab's apparatus",
    "connections": "a new connection per request",
    "front": "the front (nginx)",
    "host_cpu": "the host's cores",
    "errors": "errors",
    "memory": "memory",
    "unknown": "a cause not found",
    "none": "nothing",
}


def markdown_table() -> str:
    """The limits as a Markdown table, for docs/results-and-limits.md and the report."""
    rows = ["| limited_by | meaning |", "|---|---|"]
    return "\n".join(rows + [f"| `{name}` | {meaning} |" for name, meaning in LIMITS.items()])


@dataclass(frozen=True)
class Capacity:
    """What the model's knobs allow, to judge a step against."""

    requests: int  # simultaneous requests the knobs allow (processes x concurrency)
    knob: str  # the same in words, e.g. "50 threads x 1 process"
    cores: float  # cores the server can use: cores given to it, at most one per process
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
        given = cores_given or len(os.sched_getaffinity(0))
        return cls(
            requests=model.capacity(knobs),
            knob=f"{per}{processes} process{'es' if processes > 1 else ''}",
            cores=float(min(given, processes)),
            delay_ms=delay_ms,
            memory_mb=psutil.virtual_memory().total / MB,
            idle_rss_mb=idle_rss_mb,
            processes=processes,
            probe_cap=probe_cap,
            host_cores=psutil.cpu_count() or 0,
        )


@dataclass(frozen=True)
class Limit:
    name: str  # a key of LIMITS
    reason: str  # plain words with the figures


@dataclass(frozen=True)
class Cost:
    """What one request cost, from the step's means (None where it cannot be known)."""

    server_cpu_ms_per_req: float | None
    apparatus_cpu_ms_per_req: float | None  # load generator + upstream
    server_rss_kb_per_conn: float | None  # RSS above the idle server, per open connection
    front_cpu_ms_per_req: float | None = None  # nginx in front (None: no front)


@dataclass(frozen=True)
class Assessment:
    limit: Limit
    raised: tuple[tuple[str, Any], ...]  # (flag, evidence): `capped` or `capped_unexplained`
    cost: Cost


def assessed(record: StepRecord, capacity: Capacity) -> StepRecord:
    """The record with its limit, its cost per request and the cap flags the limit implies."""
    found = assess(record, capacity)
    raised = [Raised(name, evidence) for name, evidence in found.raised]
    return replace(
        record,
        flags=tuple(dict.fromkeys((*record.flags, *(r.flag for r in raised)))),
        evidence=_advised(record, found.limit) | {r.flag: r.evidence for r in raised},
        inferred_inflight=round(inferred_inflight(record, capacity.delay_ms), 1),
        limited_by=found.limit.name,
        limit_reason=found.limit.reason,
        server_cpu_ms_per_req=found.cost.server_cpu_ms_per_req,
        apparatus_cpu_ms_per_req=found.cost.apparatus_cpu_ms_per_req,
        server_rss_kb_per_conn=found.cost.server_rss_kb_per_conn,
        front_cpu_ms_per_req=found.cost.front_cpu_ms_per_req,
    )


def _advised(r: StepRecord, limit: Limit) -> dict[str, Any]:
    """The evidence, with a saturated apparatus's advice the one that can help: the limit itself
    where more generators cannot (the server was full, a connection per request, a full host)."""
    ev = r.evidence.get("apparatus_saturated")
    if not isinstance(ev, dict):
        return dict(r.evidence)
    said = apparatus.advice(r) if limit.name == "apparatus" else limit.reason
    return {**r.evidence, "apparatus_saturated": {**ev, "advice": said}}


def assess(record: StepRecord, cap: Capacity) -> Assessment:
    """The step's limiting resource, the cap flags it implies and the cost per request."""
    capped = _cap(record, cap) if record.ok else None  # a fact, whatever else limits the step
    raised = capped[1] if capped else []
    limit = _fault(record, cap) or _resource(record, cap) or (capped[0] if capped else None)
    limit = limit or _serialized(record, cap) or _rest(record, cap)
    return Assessment(limit, tuple(raised), cost(record, cap))


def _serialized(r: StepRecord, cap: Capacity) -> Limit | None:
    """A model the probe caught running requests one at a time, below the ideal: its cap is 1
    request per process, whatever its knobs say (the in-flight count may be unknown)."""
    ideal = ideal_rps(r, cap.delay_ms)
    if "serialized" not in r.flags or math.isnan(ideal) or r.throughput_rps >= TRACKS_IDEAL * ideal:
        return None
    return Limit(
        "concurrency_cap",
        f"serialized: requests run one at a time (see the flag's evidence), "
        f"{r.throughput_rps / ideal:.0%} of the ideal {ideal:g} req/s",
    )


def cost(r: StepRecord, cap: Capacity) -> Cost:
    if r.requests <= 0 or r.duration_s <= 0:
        return Cost(None, None, None)
    per_req = r.duration_s * 10 / r.requests  # % of a core -> ms per request
    conns = offered_concurrency(r) if r.mode == "closed" else max(upstream_inflight(r), 0)
    kb = None
    if cap.idle_rss_mb > 0 and r.server_rss_mb > 0 and conns:
        kb = round(max(r.server_rss_mb - cap.idle_rss_mb, 0.0) * 1024 / conns, 1)
    apparatus = (r.client_cpu_pct + r.upstream_cpu_pct) * per_req
    front = round(r.front_cpu_pct * per_req, 3) if r.front_cpu_pct >= 0 else None
    return Cost(round(r.server_cpu_pct * per_req, 3), round(apparatus, 3), kb, front)


def ideal_rps(r: StepRecord, delay_ms: float) -> float:
    """Users / delay in closed loop, the arrival rate in open loop (nan: no ideal)."""
    if r.rate_rps is not None:
        return float(r.rate_rps)
    return (r.users or 0) / (delay_ms / 1000) if delay_ms > 0 else math.nan


def upstream_inflight(r: StepRecord) -> int:
    """The upstream's in-flight high-water mark where the step's load went through the upstream,
    else -1 (unknown). A route that never calls it (`/sleep`, a user's app) leaves the counter at
    0 while the server answers: that is no evidence of a cap, so the caller infers from outside."""
    seen = r.upstream_max_inflight
    if r.ok > 0 and seen <= 0:
        return -1  # answers, and not one request at the upstream: the load did not pass it
    if 0 <= r.upstream_served < THROUGH_UPSTREAM * r.ok:
        return -1  # the upstream saw only a few of the step's requests
    return seen


def inferred_inflight(r: StepRecord, delay_ms: float) -> float:
    """Requests inside the server by Little's law: throughput x the unloaded service time (the
    delay; for a user's app, its route's time alone). -1 when there is no service time."""
    return r.throughput_rps * delay_ms / 1000 if delay_ms > 0 and r.ok else -1.0


def offered_concurrency(r: StepRecord, delay_ms: float = 0.0) -> float:
    """Requests that would be in flight if nothing queued: users, or rate x delay (Little)."""
    if r.rate_rps is None:
        return float(r.users or 0)
    wanted = r.rate_rps * delay_ms / 1000
    return min(wanted, float(r.max_outstanding or wanted))


def _fault(r: StepRecord, cap: Capacity) -> Limit | None:
    if r.status == "skipped" or not r.ok:
        why = ", ".join(r.flags) or "no successful response"
        return Limit("errors", f"nothing measured: {why}")
    if why := front_limit.reason(r, cap.cores, cap.front_workers, SATURATED):
        return Limit("front", why)  # named before the apparatus, as a full server is
    if saturated := _apparatus(r, cap):
        return saturated
    if "upstream_down" in r.flags:
        return Limit("upstream", f"the upstream went down: {r.evidence.get('upstream_down')}")
    failed = sum(r.errors.values())
    if r.requests and failed / r.requests >= ERRORS_LIMIT:
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(r.errors.items(), key=lambda kv: -kv[1]))
        return Limit("errors", f"{failed / r.requests:.0%} of requests failed ({kinds})")
    return None


def _apparatus(r: StepRecord, cap: Capacity) -> Limit | None:
    """The lab's apparatus ran out: what it ran out on, and only the advice that can help. A
    server at its CPU beside it is named first (both were full); a connection per request is
    named as what the apparatus's CPU went to."""
    if not set(apparatus.APPARATUS_FLAGS) & set(r.flags):
        return None
    what = apparatus.what_saturated(r)
    if _cpu_bound(r, cap):
        return Limit(
            "server_cpu",
            f"server CPU ({_cores(cap.cores)} at {r.server_cpu_pct:.0f}%) and the lab's "
            f"apparatus ({what}): both were full, so more generators alone cannot raise the "
            "throughput; more server cores or less CPU per request first",
        )
    if closing := apparatus.closing(r):
        full = apparatus.host_full(r, cap.host_cores)
        return Limit("connections", f"{closing}{'; ' + full if full else ''} ({what})")
    if full := apparatus.host_full(r, cap.host_cores):
        return Limit("host_cpu", f"{full} ({what})")
    return Limit("apparatus", f"{what}: {apparatus.advice(r)}")


def _resource(r: StepRecord, cap: Capacity) -> Limit | None:
    if cap.memory_mb and r.server_rss_mb >= MEMORY_LIMIT * cap.memory_mb:
        return Limit("memory", f"server RSS {r.server_rss_mb:.0f} MB of {cap.memory_mb:.0f} MB")
    if _cpu_bound(r, cap):
        return Limit("server_cpu", f"server CPU ({_cores(cap.cores)} at {r.server_cpu_pct:.0f}%)")
    return None


def _cap(r: StepRecord, cap: Capacity) -> tuple[Limit, list[tuple[str, Any]]] | None:
    """In-flight plateaued below the offered concurrency while requests queued: seen by the
    upstream where the load went through it, else inferred from outside (Little's law). None
    where the server was at the CPU it can use: requests then queue for the CPU, not a pool."""
    if _cpu_bound(r, cap):
        return None
    offered = offered_concurrency(r, cap.delay_ms)
    counted = upstream_inflight(r)
    seen = counted >= 0
    ceiling = counted if seen else inferred_inflight(r, cap.delay_ms)
    p50 = r.latency_ms.get("p50", 0.0)
    queueing = QUEUEING if seen else QUEUEING_INFERRED
    if ceiling < 0 or offered < 2 or ceiling > PLATEAU * offered:
        return None
    if cap.delay_ms <= 0 or p50 < queueing * cap.delay_ms:
        return None
    if not seen and (not _idle(r, cap) or _disturbed(r)):
        return None
    evidence = {
        "ceiling": round(ceiling, 1),
        "offered": round(offered, 1),
        "seen_by": "the upstream's in-flight counter"
        if seen
        else f"Little's law: {r.throughput_rps:g} req/s x {cap.delay_ms:g} ms",
        "queueing": f"~{1 - ceiling / offered:.0%} of requests wait; p50 {p50:.0f} ms "
        f"against d = {cap.delay_ms:g} ms",
        "knobs": cap.knob,
    }
    if cap.probe_cap is not None:
        evidence["probe"] = f"the probe overlapped about {cap.probe_cap:g} requests at once"
    if cap.requests <= ceiling * 1.1 + 1:
        where = f"{ceiling:.0f} requests in flight of {offered:g} offered"
        return Limit("concurrency_cap", f"{where}: the knobs' {cap.knob} explain it"), [
            ("capped", evidence)
        ]
    return Limit("concurrency_cap", _unexplained(ceiling, offered, seen, cap)), [
        ("capped_unexplained", evidence)
    ]


def _disturbed(r: StepRecord) -> bool:
    """Something besides a pool lowers throughput x delay: a saturated apparatus, a generator
    that waited for a CPU (every latency it timed grew); a serialized model's cap of one is named
    by its own flag."""
    flagged = {"apparatus_saturated", "serialized"} & set(r.flags)
    return bool(flagged) or r.apparatus_wait_pct >= apparatus.APPARATUS_WAIT_PCT


def _unexplained(ceiling: float, offered: float, seen: bool, cap: Capacity) -> str:
    """A plateau no knob explains, in words that point at where to look."""
    allows = f"the knobs allow {cap.requests}: {cap.knob}"
    probe = f"; the probe found the same, about {cap.probe_cap:g} at once" if cap.probe_cap else ""
    if seen:
        return (
            f"{ceiling:.0f} requests in flight of {offered:g} offered: no knob explains it "
            f"({allows}){probe}"
        )
    per = ceiling / max(cap.processes, 1)
    return (
        f"your app, or something it calls, lets about {per:.0f} requests run at once per process "
        f"({ceiling:.1f} in flight by Little's law, of {offered:g} offered; {allows}){probe}: "
        "a connection pool, a lock or a semaphore?"
    )


def _cpu_bound(r: StepRecord, cap: Capacity) -> bool:
    return r.server_cpu_pct >= SATURATED * 100 * cap.cores


def _idle(r: StepRecord, cap: Capacity) -> bool:
    return r.server_cpu_pct < IDLE * 100 * cap.cores


def _rest(r: StepRecord, cap: Capacity) -> Limit:
    ideal = ideal_rps(r, cap.delay_ms)
    if math.isnan(ideal) or ideal <= 0:
        return Limit("none", "no resource ran out (no ideal to compare with)")
    share = r.throughput_rps / ideal
    if share >= TRACKS_IDEAL:
        return Limit("none", f"throughput {share:.0%} of the ideal {ideal:g} req/s")
    p50 = r.latency_ms.get("p50", 0.0)
    reached = upstream_inflight(r) >= PLATEAU * offered_concurrency(r, cap.delay_ms)
    if reached and _idle(r, cap) and p50 >= UPSTREAM_SLOW * cap.delay_ms:
        return Limit(
            "upstream",
            f"every request reached the upstream, which answered in p50 {p50:.0f} ms against "
            f"its {cap.delay_ms:g} ms delay, while the server's CPU idled",
        )
    return Limit(
        "unknown",
        f"below the ideal with no resource saturated: cause not found (throughput {share:.0%} "
        f"of the ideal {ideal:g} req/s, server CPU {r.server_cpu_pct:.0f}% of "
        f"{_cores(cap.cores)}, p50 {p50:.0f} ms against d = {cap.delay_ms:g} ms)",
    )


def _cores(n: float) -> str:
    return f"{n:g} core" + ("s" if n != 1 else "")
