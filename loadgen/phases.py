"""A step's phases in a generator process: settle, measure, and the drain and cut-off after the
window, on one generator (`run_phases`) or as one share of several (`share_window`, timed from the
step's common start); and what the process leaves out of its request path while it measures.

Why the cut-off is shared: either loop counts a request by when it was sent (closed loop) or due
(open loop) inside the window, whenever it answers; after the window each waits (bounded) for
those requests and records the rest with their ages as lower bounds (`drain_pending`), so a server
that stops answering near the cut-off cannot hide the requests it holds.

Why lean: the lab records every latency into its own HdrHistogram (`loadgen.recording`), so
locust's statistics (a second record of each request, kept by a listener every runner registers)
are work the generator does for nobody; and CPython's collector, left at its defaults, walks
locust's and gevent's long-lived objects again and again, stopping the event loop each time.
Measured on one core against a fast target at 50 users (benchmarks/latency_fidelity.py's
conditions), both together: 10.4k -> 11.5k req/s and the loop lag p99 at saturation from 13-17 ms
to 4-5 ms.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import gevent

from loadgen.protocol import Done, Measuring, Sample, Start
from loadgen.recording import CpuMeter, Meter, Recorder, emit

if TYPE_CHECKING:
    from locust.env import Environment

SAMPLE_SERIES = (  # in Done.timeseries
    *("t", "rps", "errors", "p50_ms", "p99_ms", "client_cpu_pct"),
    *("lag_p99_ms", "lag_max_ms"),
)
OPEN_LOOP_SERIES = ("dropped", "inflight")
DRAIN_MAX_S = 10.0  # the longest wait for the window's requests after it closes (either loop)
GC_THRESHOLD = (20_000, 50, 100)  # young-generation collections 30x rarer than CPython's 700


def quiet_gc() -> None:
    """Freeze what exists now (imports, the runner, the users) out of every later collection and
    collect the young generation less often: shorter and fewer pauses of the event loop."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLD)


def drop_locust_stats(env: Environment) -> None:
    """Remove the statistics listener a locust runner adds to the request event (a closure in
    `Runner.__init__`, with no public handle); the lab's own listeners stay. Without the
    attribute (another locust), nothing changes."""
    handlers = getattr(env.events.request, "_handlers", None)
    if isinstance(handlers, list):
        handlers[:] = [
            h for h in handlers if "Runner.__init__" not in getattr(h, "__qualname__", "")
        ]


def run_phases(
    start: Start,
    recorder: Recorder,
    extra_sample: Callable[[], dict[str, int]] = dict,
    cpu: Meter | None = None,
) -> Done:
    """Settle (nothing recorded), then measure exactly `duration_s`, one sample per second.

    The load is already running when this is called and is stopped by the caller afterwards.
    `extra_sample` adds a generator's own per-second figures (open loop: dropped, in flight);
    `cpu` measures the generator's CPU (default: this process's).
    """
    cpu = cpu or CpuMeter()
    quiet_gc()
    _settle(start, recorder, cpu)
    started_at = datetime.now(UTC).isoformat(timespec="milliseconds")
    emit(Measuring(started_at))
    cpu.lap()
    recorder.take()  # the settle's requests and lag are not measured
    recorder.measuring, recorder.opened_at = True, time.perf_counter()
    t0 = time.monotonic()
    samples = _measure(start, recorder, cpu, extra_sample)
    recorder.measuring = False
    duration_s = time.monotonic() - t0
    cpu_series = [s.client_cpu_pct for s in samples]
    keys = SAMPLE_SERIES + (OPEN_LOOP_SERIES if start.mode == "open" else ())
    return Done(
        started_at=started_at,
        duration_s=round(duration_s, 3),
        requests=recorder.requests,
        ok=recorder.ok,
        errors=dict(recorder.errors),
        **recorder.latency(),
        client_cpu_pct=round(sum(cpu_series) / len(cpu_series), 1) if cpu_series else 0.0,
        timeseries={k: [getattr(s, k) for s in samples] for k in keys} if samples else {},
        generator_lag_ms=recorder.lag_ms(),
        periodic_pct=recorder.periodic_pct(duration_s),
        routes=recorder.route_figures(),
        answers_100ms=recorder.answers_per_tick(duration_s),
    )


def drain_pending(
    recorder: Recorder, pending: Mapping[int, tuple[float, str]], timeout_s: float
) -> tuple[float, list[float]]:
    """Wait (bounded by the request timeout and DRAIN_MAX_S) for the window's requests still
    `pending` (each: when it was sent, or due, and its route), then record each one left with
    its age at the cut-off, a lower bound of its latency, into the running interval. Returns
    the cut-off (perf_counter) and those ages (ms). Either loop's caller then ignores answers
    after the cut-off, so none counts twice."""
    t0 = time.perf_counter()
    while pending and time.perf_counter() - t0 < min(timeout_s, DRAIN_MAX_S):
        gevent.sleep(0.05)
    cutoff = time.perf_counter()
    ages = [((cutoff - sent) * 1000, name) for sent, name in pending.values()]
    for age, name in ages:
        recorder.bound(age, name)
    return cutoff, [age for age, _ in ages]


def after_drain(
    done: Done, recorder: Recorder, unfinished: int, latency: dict[str, Any], **loop: Any
) -> Done:
    """The step's figures once its drain is over: the drain's answers, the requests still
    unfinished (counted, their ages in `latency` as lower bounds), and the loop's own figures
    (`open_loop=` or `closed_loop=`, and `parts=` on several generators)."""
    return replace(
        done,
        requests=recorder.requests + unfinished,
        ok=recorder.ok,
        errors=dict(recorder.errors),
        routes=recorder.route_figures(),  # a mix's routes: the drain's requests too
        login=recorder.login_figures(),  # a login step: every user's, apart from the mix
        **latency,
        **loop,
    )


def common_begin(start: Start) -> float:
    """The step's common start (`Start.begin_at`, wall clock) on this process's perf_counter: in
    the past if START came late, never shifted."""
    return time.perf_counter() + (start.begin_at - time.time() if start.begin_at else 0.0)


def share_window(start: Start, recorder: Recorder, begin: float) -> None:
    """One generator's part of a step run by several: its settle and measured window timed from
    the common start (`common_begin`), not by `run_phases`; the master's rolls collect the
    intervals, and the caller drains after it."""
    _sleep_until(begin + start.settle_s)
    recorder.measuring, recorder.opened_at = True, begin + start.settle_s
    _sleep_until(begin + start.settle_s + start.duration_s)
    recorder.measuring = False


def _sleep_until(when: float) -> None:
    gevent.sleep(max(0.0, when - time.perf_counter()))


def _settle(start: Start, recorder: Recorder, cpu: Meter) -> None:
    t0 = time.monotonic()
    settle_end = t0 + start.settle_s
    while (now := time.monotonic()) < settle_end:
        gevent.sleep(min(1.0, settle_end - now))
        recorder.refresh()
        t = round(time.monotonic() - t0, 2)
        emit(Sample("settle", t, cpu.lap(), recorder.live_requests, recorder.live_errors))


def _measure(
    start: Start, recorder: Recorder, cpu: Meter, extra_sample: Callable[[], dict[str, int]]
) -> list[Sample]:
    """Exactly `duration_s` measured, cut into one-second intervals."""
    t0 = time.monotonic()
    end = t0 + start.duration_s
    samples: list[Sample] = []
    tick_start = t0
    while tick_start < end - 1e-3:
        gevent.sleep(max(0.0, min(tick_start + 1.0, end) - time.monotonic()))
        now = time.monotonic()
        work_start = time.perf_counter()
        figures = recorder.roll(tick_start - t0, now - t0)
        sample = Sample(
            "measure",
            round(now - t0, 2),
            cpu.lap(),
            recorder.live_requests,
            recorder.live_errors,
            **figures,
            **extra_sample(),
        )
        samples.append(sample)
        emit(sample)
        tick_start = now
        recorder.periodic_s += time.perf_counter() - work_start
    return samples
