"""Was the apparatus (the generator, the upstream, the host) what set a step's figures?

A step is flagged `apparatus_saturated` when a core the generator or the upstream runs on was
saturated by them, or the upstream's event loop woke late; `host_busy` when processes outside the
run took a core's share. Either means the lab, not the model, limited what was measured.
`generator_lag` when the generator's own event loop woke late enough to have moved the step's
p99: its throughput may stand, its tail is not the server's.
"""

from __future__ import annotations

from lab.record.step import Measured, Raised, Sampled

APPARATUS_CORE_PCT = 90.0  # a core the generator or upstream runs on, busy % (mean of the window)
# ... and the apparatus using this much of it, or waiting this long for a CPU (run-queue wait, %
# of the time): a busy core the apparatus neither fills nor waits on is only `host_busy`
APPARATUS_SHARE_PCT = 25.0
APPARATUS_WAIT_PCT = 10.0
# Waiting for a CPU this share of the window is saturation whatever the mean busy says: a core
# 87% busy on average can still keep the generator off the CPU 42% of the time, and every request
# it times then includes that wait. Measured on 2 cores (quick scenario, nothing else running):
# up to 12% at 50 users, 24% for uwsgi-threads at 100 users with p50 within 3 ms of uvicorn's,
# 35% at 200 users with p50 19 ms above it: the distortion starts between the two.
APPARATUS_QUEUED_PCT = 30.0
# The upstream's event loop waking this late on average (ms, or this share of the delay) adds that
# much to every request's wait: the upstream, not the model, set part of the latency.
UPSTREAM_LAG_MS = 5.0
UPSTREAM_LAG_SHARE = 0.05
HOST_BUSY_PCT = 50.0  # CPU used by processes outside the run, in % of one core
# The generator's loop lag (p99 over time, `loadgen.recording.LoopLag`) adds up to that much to a
# request answered or sent during a stall. The instrument's error budget against independent
# tools (benchmarks/latency_fidelity.py) is 15% of the p99 or 3 ms, whichever is larger: a lag p99
# within it cannot move the p99 past what wrk or oha would report. Measured on 2 cores, server on
# the other core: healthy steps lag 1.1-1.6 ms at p99 (p99 12.8-24.7 ms, within 0.88-1.14x of
# wrk and oha); a generator stopped 100 ms a second lags 95 ms and its p99 is 100 ms above oha's.
GENERATOR_LAG_MS = 3.0
GENERATOR_LAG_SHARE = 0.15


def host_busy(measured: Measured, sampled: Sampled) -> list[Raised]:
    """Processes outside the run; kernel softirq (network) work is charged to no process, so
    it is counted apart instead of blamed on them."""
    apparatus = sampled.server_cpu_pct + measured.client_cpu_pct + sampled.upstream_cpu_pct
    others = sampled.host_cpu_pct - apparatus - sampled.host_softirq_pct
    if others < HOST_BUSY_PCT:
        return []
    kernel = f" (besides {sampled.host_softirq_pct:.0f}% kernel softirq, network work)"
    return [Raised("host_busy", f"other processes used {others:.0f}% of a core{kernel}")]


def saturated(measured: Measured, sampled: Sampled, delay_ms: float) -> list[Raised]:
    """A core the generator or the upstream ran on was saturated, or the upstream's event loop
    woke late on average (every request's wait grew by that): the lab set the figures."""
    busy = sampled.apparatus_core_pct
    own = measured.client_cpu_pct + sampled.upstream_cpu_pct
    waited = sampled.apparatus_wait_pct
    shared = own >= APPARATUS_SHARE_PCT or waited >= APPARATUS_WAIT_PCT
    core = busy >= APPARATUS_CORE_PCT and shared
    queued = waited >= APPARATUS_QUEUED_PCT
    lag_limit = max(UPSTREAM_LAG_MS, UPSTREAM_LAG_SHARE * delay_ms)
    late = sampled.upstream_lag_ms >= lag_limit
    if not (core or queued or late):
        return []
    evidence = {
        "core_busy_pct": busy,
        "waited_for_cpu_pct": waited,
        "waited_limit_pct": APPARATUS_QUEUED_PCT,
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
    limit = max(GENERATOR_LAG_MS, GENERATOR_LAG_SHARE * p99)
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
