"""Was the apparatus (the generator, the upstream, the host) what set a step's figures?

A step is flagged `apparatus_saturated` when a core the generator or the upstream runs on was
saturated by them, or the upstream's event loop woke late; `host_busy` when processes outside the
run took a core's share. Either means the lab, not the model, limited what was measured.
`generator_lag` when the generator's own event loop woke late enough to have moved the step's
p99: its throughput may stand, its tail is not the server's.
"""

from __future__ import annotations

from lab.record import counted
from lab.record.step import Measured, Raised, Sampled, StepRecord

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


# New TCP connections to the server per request at or above this: the server closes connections
# (uWSGI's HTTP router closes each one after its response), so every request pays a connect, an
# accept and a close. Measured on 2 cores, 100 users, /sleep?ms=10: uwsgi-threads 1.0 per
# request, gunicorn-gthread (keep-alive) 0.0.
CONNECTION_PER_REQUEST = 0.5
HOST_FULL = 0.90  # the host's CPU at this share of all its cores: no core is left to add
APPARATUS_FLAGS = ("apparatus_saturated", "client_saturated")


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
    limit = max(GENERATOR_LAG_MS, GENERATOR_LAG_SHARE * p99)
    if not measured.generator_lag_ms or lag_p99 < limit:
        return []
    evidence = {"lag_p99_ms": lag_p99, "limit_ms": round(limit, 2), "latency_p99_ms": p99}
    return [Raised("generator_lag", evidence)]


def what_saturated(r: StepRecord) -> str:
    """The apparatus's saturation in words, with its figures (what it was, not what to do)."""
    if "apparatus_saturated" not in r.flags:
        return str(r.evidence.get("client_saturated"))
    ev = r.evidence.get("apparatus_saturated") or {}
    lag, lag_limit = ev.get("upstream_loop_lag_ms", -1), ev.get("upstream_loop_lag_limit_ms")
    late = (
        f"; the upstream's event loop woke {lag} ms late on average"
        if lag_limit and (lag >= lag_limit)
        else ""
    )
    return (
        f"a core the apparatus ran on was {ev.get('core_busy_pct', '?')}% busy (generator "
        f"{r.client_cpu_pct:.0f}%, upstream {r.upstream_cpu_pct:.0f}% of a core, waiting "
        f"{ev.get('waited_for_cpu_pct', '?')}% of the time for a CPU){late}"
    )


def connections_per_request(r: StepRecord) -> float | None:
    """TCP connections to the server closed per request in the window (None: not measured)."""
    if r.server_connections < 0 or r.requests <= 0:
        return None
    return r.server_connections / r.requests


def closing(r: StepRecord) -> str:
    """Where the server closed a connection per request, what that cost, in words ("" if not)."""
    per = connections_per_request(r)
    if per is None or per < CONNECTION_PER_REQUEST:
        return ""
    waiting = f", {r.server_time_wait:,} sockets in TIME_WAIT" if r.server_time_wait > 0 else ""
    return (
        f"the server closes each connection after its response ({per:.2f} TCP connections "
        f"closed per request{waiting}), so every request pays a connect, an accept and a close "
        f"in the generators and the kernel (softirq {r.host_softirq_pct:.0f}% of a core): more "
        "generators share that work but do not remove it, and a server that keeps connections "
        "alive does not pay it"
    )


def host_full(r: StepRecord, host_cores: int) -> str:
    """The host's cores all busy, in words ("" when some were left or the count is unknown)."""
    if host_cores <= 0 or r.host_cpu_pct < HOST_FULL * 100 * host_cores:
        return ""
    return (
        f"the host's {host_cores} cores were all busy ({r.host_cpu_pct:.0f}%): more generators "
        "on this machine cannot help; run them on another (--remote-generators)"
    )


def advice(r: StepRecord) -> str:
    """What would lift a saturated apparatus where nothing else was full (the server, the host)
    and no connection per request took its CPU."""
    if "apparatus_saturated" in r.flags:
        return "fewer users, more generators, or a machine with more cores"
    return "use more generators"
