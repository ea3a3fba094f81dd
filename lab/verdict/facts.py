"""The facts of a step, derived once from its record and what its knobs allow.

Every rule of the verdict reads these and nothing else, so two rules cannot read the same figure
two ways (the client's p50 as the upstream's, a generator's queue as the app's pool). The
disturbances are one set: anything besides the server that may have moved the figures. A
disturbance never becomes the app's cap: an in-flight count inferred from outside (Little's law)
is only trusted where nothing disturbed the step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from lab.record.step import StepRecord
from lab.record.thresholds import T
from lab.verdict.capacity import Capacity
from lab.verdict.pauses import Pause, pauses_of

# Flags that say the lab failed to measure the step, or the server or upstream failed during it.
FAULTS = (
    "no_responses",
    "start_failed",
    "preflight_failed",
    "server_died",
    "server_hung",
    "upstream_down",
    "loadgen_failed",
    "interrupted",
)

# The disturbances, in words (facts.disturbances holds their names).
DISTURBANCES = {
    "generator_saturated": "a load generator at its core's limit",
    "apparatus_core": "a core the generator or the upstream ran on was full, or they queued for it",
    "upstream_late": "the upstream's event loop woke late",
    "generator_late": "the generator's own event loop woke late",
    "host_busy": "other processes used the machine's CPU",
    "apparatus_cpu_wait": "the generator or the upstream waited for a CPU",
    "server_cpu_wait": "the server waited for a CPU it was not using itself",
}


@dataclass(frozen=True)
class Facts:
    """What one step's figures say, each derived once."""

    r: StepRecord
    cap: Capacity
    measured: bool  # something was measured and answered
    faults: tuple[str, ...]  # flags of a fault (the lab's, the server's or the upstream's)
    ideal_rps: float  # users / d, or the arrival rate (nan: no ideal)
    share_of_ideal: float  # throughput / ideal (nan: no ideal)
    server_cpu_share: float  # of the cores the server can use (with nginx's, where it fronts)
    offered: float  # requests that would be in flight if nothing queued
    inflight: float  # seen by the upstream's counter, else inferred from outside (-1: unknown)
    inflight_seen: bool  # True: by the upstream's counter
    p50_ms: float
    wait_ms: float  # how long requests took: the greater of p50 and the mean (`waited`)
    conns_per_request: float | None  # TCP connections closed per request (None: unknown)
    failed_share: float  # failed and dropped requests, of all requests
    memory_share: float  # the server's memory of the machine's
    host_full: bool  # every core of the host busy
    disturbances: frozenset[str]
    outage: tuple[int, ...] = ()  # measured seconds (0-based) with almost no answers (`outage_of`)
    pauses: tuple[Pause, ...] = ()  # quiet stretches inside seconds (`lab.verdict.pauses`)

    @property
    def cpu_bound(self) -> bool:
        return self.server_cpu_share >= T.server_cpu_saturated_share

    @property
    def idle(self) -> bool:
        return self.server_cpu_share < T.server_cpu_idle_share

    @property
    def below_ideal(self) -> bool:
        return not math.isnan(self.share_of_ideal) and self.share_of_ideal < T.tracks_ideal_share

    @property
    def disturbed(self) -> bool:
        return bool(self.disturbances)

    def lab_disturbances(self) -> frozenset[str]:
        """The disturbances of the lab's own apparatus (generators, upstream)."""
        return self.disturbances - {"host_busy", "server_cpu_wait"}


def facts_of(r: StepRecord, cap: Capacity) -> Facts:
    ideal = ideal_rps(r, cap.delay_ms)
    seen = upstream_inflight(r)
    cores = max(cap.cores, 1e-9)
    # nginx in front shares the server's cores
    cpu_share = r.resources.deployed_cpu_pct / (100 * cores)
    failed = sum(r.load.errors.values())
    return Facts(
        r=r,
        cap=cap,
        measured=r.status != "skipped" and r.load.ok > 0,
        faults=tuple(f for f in r.evidence.flags if f in FAULTS),
        ideal_rps=ideal,
        share_of_ideal=r.load.throughput_rps / ideal if ideal > 0 else math.nan,
        server_cpu_share=cpu_share,
        offered=offered_concurrency(r, cap.delay_ms),
        inflight=float(seen) if seen >= 0 else inferred_inflight(r, cap.delay_ms),
        inflight_seen=seen >= 0,
        p50_ms=r.latency.latency_ms.get("p50", 0.0),
        wait_ms=waited(r.latency.latency_ms),
        conns_per_request=connections_per_request(r),
        # every request that is not an answer (dropped and unfinished too) of every request,
        # where the generator counted them (`lab.record.counted`); older records: the errors
        failed_share=r.latency.unanswered_share
        if r.latency.unanswered_share >= 0
        else failed / r.load.requests
        if r.load.requests > 0
        else 0.0,
        memory_share=r.resources.server_rss_mb / cap.memory_mb if cap.memory_mb else 0.0,
        host_full=cap.host_cores > 0
        and r.resources.host_cpu_pct >= T.host_full_share * 100 * cap.host_cores,
        disturbances=disturbances(r, cpu_share, cap.delay_ms),
        outage=outage_of(r),
        pauses=pauses_of(r, cap.delay_ms),
    )


def outage_of(r: StepRecord) -> tuple[int, ...]:
    """The measured seconds in which the server almost stopped answering while requests waited:
    at most `outage_second_share` of the step's median answers a second, where that median is
    enough to tell (`outage_min_answers_per_s`), and not a second the generator's own loop
    stalled through (its lag that second, `lag_max_ms`). Closed loop: every user waits on its
    request; open loop: arrivals keep coming. Read from the per-second series every step keeps, so
    it holds for any app and any cause (a GC pause, a lock convoy, a worker respawned)."""
    median = median_rps(r)
    if not (r.users or r.rate_rps) or median < T.outage_min_answers_per_s:
        return ()
    lags = list(r.timeseries.get("lag_max_ms") or [])
    own_ms = T.outage_generator_lag_share * 1000
    return tuple(
        i
        for i, x in enumerate(r.timeseries.get("rps") or [])
        if x == x
        and x <= T.outage_second_share * median
        and not (i < len(lags) and lags[i] >= own_ms)
    )


def median_rps(r: StepRecord) -> float:
    """The median answers a second of the measured seconds with any (0: too few to tell). Over
    the seconds with answers, as the pauses' bins are, because an outage longer than half the
    window would otherwise be its own median and hide itself."""
    rps = sorted(x for x in r.timeseries.get("rps") or [] if x == x and x > 0)
    return rps[len(rps) // 2] if len(rps) >= T.outage_min_seconds else 0.0


def disturbances(r: StepRecord, server_cpu_share: float, delay_ms: float) -> frozenset[str]:
    """Everything besides the server that may have moved the step's figures."""
    found = {
        "generator_saturated": "client_saturated" in r.evidence.flags,
        "apparatus_core": _apparatus_core(r),
        "upstream_late": r.evidence.upstream_lag_ms >= upstream_lag_limit_ms(delay_ms),
        "generator_late": "generator_lag" in r.evidence.flags,
        "host_busy": "host_busy" in r.evidence.flags,
        "apparatus_cpu_wait": r.resources.apparatus_wait_pct >= T.apparatus_cpu_wait_pct,
        # A server's own threads and processes queue for its cores too (a pool of 10 threads
        # on one core waits on itself): its wait is a disturbance only beside other processes,
        # on the machine or, where its cores are its own, on those cores.
        "server_cpu_wait": r.resources.server_wait_pct >= T.server_cpu_wait_pct
        and server_cpu_share < T.server_cpu_saturated_share
        and ("host_busy" in r.evidence.flags or others_beside(r) >= T.host_busy_pct),
    }
    return frozenset(name for name, yes in found.items() if yes)


def others_beside(r: StepRecord) -> float:
    """CPU beside the server on its cores, % of one core: measured on its own cores, or the
    processes outside the run seen where it could run (`StepRecord.others_on_cores`)."""
    return max(others_on_server_cores(r), sum(r.resources.others_on_cores.values()))


def others_on_server_cores(r: StepRecord) -> float:
    """CPU that ran on the server's own cores besides the server (and nginx in front), % of
    one core (0: not measured, its cores not its own)."""
    if r.resources.server_cores_busy_pct < 0:
        return 0.0
    return max(r.resources.server_cores_busy_pct - r.resources.deployed_cpu_pct, 0.0)


def _apparatus_core(r: StepRecord) -> bool:
    """The apparatus flag for another reason than the upstream's late loop."""
    ev = r.evidence.details.get("apparatus_saturated")
    if "apparatus_saturated" not in r.evidence.flags:
        return False
    if not isinstance(ev, dict) or not ev:
        return True  # flagged with no figures to tell why: the flag's word stands
    if "causes" in ev:  # core: busy and the apparatus's; queued: waited for a CPU; late: upstream
        return bool({"core", "queued"} & set(ev["causes"]))
    busy = float(ev.get("core_busy_pct", 0.0)) >= T.apparatus_core_busy_pct
    return busy or float(ev.get("waited_for_cpu_pct", 0.0)) >= T.apparatus_queued_pct


def waited(latency_ms: dict[str, float]) -> float:
    """How long a step's requests took, for telling a queue: the greater of p50 and the mean.
    A queue that serves its waiters unfairly (gevent's semaphore wakes the latest first, say)
    lets most requests through in about one delay while the rest wait seconds: p50 103 ms
    against d = 100 ms, mean 400 ms, 20 users on a pool of 4; the mean is Little's law's own
    figure (in flight = throughput x mean), the p50 alone missed the queue."""
    return max(latency_ms.get("p50", 0.0), latency_ms.get("mean", 0.0))


def upstream_lag_limit_ms(delay_ms: float) -> float:
    """How late the upstream's loop may wake on average before it sets part of every wait."""
    return max(T.upstream_lag_ms, T.upstream_lag_delay_share * delay_ms)


def ideal_rps(r: StepRecord, delay_ms: float) -> float:
    """Users / delay in closed loop, the arrival rate in open loop (nan: no ideal)."""
    if r.rate_rps is not None:
        return float(r.rate_rps)
    return (r.users or 0) / (delay_ms / 1000) if delay_ms > 0 else math.nan


def upstream_inflight(r: StepRecord) -> int:
    """The upstream's in-flight high-water mark where the step's load went through the upstream,
    else -1 (unknown). A route that never calls it (`/sleep`, a user's app) leaves the counter at
    0 while the server answers: that is no evidence of a cap, so the caller infers from outside."""
    seen = r.load.upstream_max_inflight
    if r.load.ok > 0 and seen <= 0:
        return -1  # answers, and not one request at the upstream: the load did not pass it
    if 0 <= r.load.upstream_served < T.through_upstream_share * r.load.ok:
        return -1  # the upstream saw only a few of the step's requests
    return seen


def inferred_inflight(r: StepRecord, delay_ms: float) -> float:
    """Requests inside the server by Little's law: throughput x the unloaded service time (the
    delay; for a user's app, its route's time alone). -1 when there is no service time."""
    return r.load.throughput_rps * delay_ms / 1000 if delay_ms > 0 and r.load.ok else -1.0


def offered_concurrency(r: StepRecord, delay_ms: float = 0.0) -> float:
    """Requests that would be in flight if nothing queued: users, or rate x delay (Little)."""
    if r.rate_rps is None:
        return float(r.users or 0)
    wanted = r.rate_rps * delay_ms / 1000
    return min(wanted, float(r.max_outstanding or wanted))


def connections_per_request(r: StepRecord) -> float | None:
    """TCP connections to the server closed per request in the window (None: not measured)."""
    if r.load.server_connections < 0 or r.load.requests <= 0:
        return None
    return r.load.server_connections / r.load.requests


def generators_needed(client_cpu_pct: float) -> int:
    """Generator processes a step would have needed to keep each under the saturation line
    (`client_saturated`'s evidence; the summary's advice for a record without it)."""
    return max(1, math.ceil(client_cpu_pct / T.generator_cpu_saturated_pct))
