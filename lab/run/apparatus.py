"""Was the apparatus (the generator, the upstream, the host) what set a step's figures?

A step is flagged `apparatus_saturated` when a core the generator or the upstream runs on was
saturated by them, or the upstream's event loop woke late; `host_busy` when processes outside the
run took a core's share. Either means the lab, not the model, limited what was measured.
`generator_lag` when the generator's own event loop woke late enough to have moved the step's
p99: its throughput may stand, its tail is not the server's.
"""

from __future__ import annotations

from lab.record.step import Measured, Raised, Sampled
from lab.record.thresholds import T


def host_busy(measured: Measured, sampled: Sampled) -> list[Raised]:
    """Processes outside the run; kernel softirq (network) work is charged to no process, so
    it is counted apart instead of blamed on them."""
    apparatus = sampled.server_cpu_pct + measured.client_cpu_pct + sampled.upstream_cpu_pct
    others = sampled.host_cpu_pct - apparatus - sampled.host_softirq_pct
    if others < T.host_busy_pct:
        return []
    kernel = f" (besides {sampled.host_softirq_pct:.0f}% kernel softirq, network work)"
    return [Raised("host_busy", f"other processes used {others:.0f}% of a core{kernel}")]


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
    """The generator's own event loop woke late enough, at p99, to have moved the step's p99:
    the tail may be the instrument's, so the step is never the basis of a p99 verdict."""
    lag_p99 = measured.generator_lag_ms.get("p99", 0.0)
    p99 = measured.latency_ms.get("p99", 0.0)
    limit = max(T.generator_lag_ms, T.generator_lag_p99_share * p99)
    if lag_p99 < limit:
        return []
    evidence = {
        "lag_p99_ms": lag_p99,
        "lag_max_ms": measured.generator_lag_ms.get("max", 0.0),
        "limit_ms": round(limit, 2),
        "latency_p99_ms": p99,
        "periodic_pct": measured.generator_periodic_pct,
    }
    return [Raised("generator_lag", evidence)]
