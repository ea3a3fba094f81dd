"""Was the apparatus (the generator, the upstream, the host) what set a step's figures?

A step is flagged `apparatus_saturated` when a core the generator or the upstream runs on was
saturated by them, or the upstream's event loop woke late; `host_busy` when processes outside the
run took a core's share. Either means the lab, not the model, limited what was measured.
`generator_lag` when the generator's own event loop woke late enough to have moved the step's
p99: its throughput may stand, its tail is not the server's.
"""

from __future__ import annotations

from lab.record import counted
from lab.record.step import Measured, Raised, Sampled
from lab.record.thresholds import T


def host_busy(measured: Measured, sampled: Sampled, elsewhere_cpu_pct: float = 0.0) -> list[Raised]:
    """Processes outside the run: the machine's busy time less the run's, over the same seconds
    (`HostMeter.accounted`): the run is the lab's own process and everything it started (the
    server, generators, upstream, front, the app's databases, its samplers' commands), so nothing
    the lab does is blamed on others. Kernel softirq (network) work is charged to no process, so
    it is counted apart instead of blamed on them. An older record without the run's own figure
    is judged by its apparatus's meters; `elsewhere_cpu_pct` is then the generators on other
    machines (`--remote-generators`), in the step's client CPU but not in this host's."""
    if sampled.run_cpu_pct >= 0:
        run = sampled.run_cpu_pct
    else:
        run = sampled.server_cpu_pct + measured.client_cpu_pct - elsewhere_cpu_pct
        run += sampled.upstream_cpu_pct + max(sampled.front_cpu_pct, 0.0)
    others = sampled.host_cpu_pct - run - sampled.host_softirq_pct
    if others < T.host_busy_pct:
        return []
    said = (
        f"other processes used {others:.0f}% of a core: the machine was "
        f"{sampled.host_cpu_pct:.0f}% busy (100% = one core), the run (the lab and all it "
        f"started) {run:.0f}%, kernel softirq (network work) {sampled.host_softirq_pct:.0f}%"
    )
    return [Raised("host_busy", said)]


def saturated(measured: Measured, sampled: Sampled, delay_ms: float) -> list[Raised]:
    """A core the generator or the upstream ran on was saturated, or the upstream's event loop
    woke late on average (every request's wait grew by that): the lab set the figures."""
    busy = sampled.apparatus_core_pct
    own = measured.client_cpu_pct + sampled.upstream_cpu_pct
    waited = sampled.apparatus_wait_pct
    shared = own >= T.apparatus_own_cpu_pct or waited >= T.apparatus_cpu_wait_pct
    core = busy >= T.apparatus_core_busy_pct and shared
    queued = waited >= T.apparatus_queued_pct
    lag_limit = max(T.upstream_lag_ms, T.upstream_lag_delay_share * delay_ms)
    late = sampled.upstream_lag_ms >= lag_limit
    if not (core or queued or late):
        return []
    causes = [name for name, yes in (("core", core), ("queued", queued), ("late", late)) if yes]
    evidence = {
        "causes": causes,
        "core_busy_pct": busy,
        "waited_for_cpu_pct": waited,
        "waited_limit_pct": T.apparatus_queued_pct,
        "client_cpu_pct": measured.client_cpu_pct,
        "upstream_cpu_pct": sampled.upstream_cpu_pct,
        "upstream_loop_lag_ms": sampled.upstream_lag_ms,
        "upstream_loop_lag_max_ms": sampled.upstream_lag_max_ms,
        "upstream_loop_lag_limit_ms": lag_limit,
        "advice": "fewer users, more generators, or a machine with more cores"
        + ("; the upstream's loop was late: give it more processes or a core" if late else ""),
    }
    return [Raised("apparatus_saturated", evidence)]


def generator_lag(measured: Measured) -> list[Raised]:
    """The generator's own stalls touched enough requests, by enough, to have moved the step's
    p99 (`generator_lag`: never the basis of a p99 verdict) or only its p99.9 or max
    (`generator_lag_extremes`), counted per request (`lab.record.counted`). A generator that
    reports no per-request count (an older one) is judged by its lag p99 over time as before."""
    dropped = int((measured.open_loop or {}).get("dropped") or 0)
    total = measured.requests + dropped
    stalls = (measured.generator_lag, measured.late_sends)
    shares = counted.touched_shares(stalls, total, measured.latency_ms)
    if not shares:
        return _lag_over_time(measured)
    moved = counted.moved_by_stalls(shares)
    if not moved:
        return []
    evidence = {
        "touched_pct": {k: round(100 * v, 3) for k, v in shares.items()},
        "moved": list(moved),
        "latency_ms": {k: measured.latency_ms.get(k, 0.0) for k in counted.ABSORBS},
        "lag_p99_ms": measured.generator_lag_ms.get("p99", 0.0),
        "lag_max_ms": measured.generator_lag_ms.get("max", 0.0),
        "periodic_pct": measured.generator_periodic_pct,
    }
    flag = "generator_lag" if "p99" in moved else "generator_lag_extremes"
    return [Raised(flag, evidence)]


def _lag_over_time(measured: Measured) -> list[Raised]:
    """The older rule, for a generator without a per-request count: its loop's lag p99 (a share
    of time) against the step's p99."""
    lag_p99 = measured.generator_lag_ms.get("p99", 0.0)
    p99 = measured.latency_ms.get("p99", 0.0)
    limit = max(T.generator_lag_ms, T.generator_lag_p99_share * p99)
    if not measured.generator_lag_ms or lag_p99 < limit:
        return []
    evidence = {"lag_p99_ms": lag_p99, "limit_ms": round(limit, 2), "latency_p99_ms": p99}
    return [Raised("generator_lag", evidence)]
