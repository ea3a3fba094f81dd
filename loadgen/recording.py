"""What every load-generator process shares: recording requests and the settle/measure phases.

Imported only by the generator processes, which have monkey-patched with gevent before this.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import gevent
import psutil
from hdrh.histogram import HdrHistogram

from loadgen import hist
from loadgen.errors import classify
from loadgen.spec import StepSpec

TICK_KEYS = ("t", "rps", "errors", "p50_ms", "p99_ms", "client_cpu_pct")


class Recorder:
    """Listens to locust's request event; keeps one histogram and error counter per second."""

    def __init__(self, expected: bytes | None) -> None:
        self.expected = expected
        self.measuring = False
        self.interval = hist.new_histogram()
        self.interval_requests = 0
        self.interval_errors: Counter[str] = Counter()
        self.whole = hist.new_histogram()  # every measured second merged
        self.sink: Callable[[float, float, HdrHistogram], None] | None = None  # e.g. an .hlog
        self.errors: Counter[str] = Counter()
        self.requests = 0
        self.ok = 0
        self.live_requests = 0  # every completion, measured or not, for the progress display
        self.live_errors = 0

    def on_request(
        self,
        response_time: float,
        response: Any = None,
        exception: BaseException | None = None,
        **_: Any,
    ) -> None:
        status = getattr(response, "status_code", 0) or 0
        content = getattr(response, "content", None) if exception is None else None
        kind = classify(exception, status, content, self.expected)
        self.live_requests += 1
        self.live_errors += kind is not None
        if not self.measuring:
            return
        self.interval_requests += 1
        if kind is None:
            hist.record_ms(self.interval, response_time)
        else:
            self.interval_errors[kind] += 1

    def roll(self, start: float, end: float) -> dict[str, Any]:
        """Close the current one-second interval; return its tick figures."""
        done, self.interval = self.interval, hist.new_histogram()
        errors, self.interval_errors = self.interval_errors, Counter()
        requests, self.interval_requests = self.interval_requests, 0
        self.whole.add(done)
        if self.sink is not None:
            self.sink(start, end, done)
        self.requests += requests
        self.ok += done.get_total_count()
        self.errors.update(errors)
        summary = hist.summary_ms(done)
        span = max(end - start, 1e-9)
        return {
            "rps": round(done.get_total_count() / span, 1),
            "errors": sum(errors.values()),
            "p50_ms": summary["p50"],
            "p99_ms": summary["p99"],
        }

    def live(self) -> dict[str, int]:
        return {"live_requests": self.live_requests, "live_errors": self.live_errors}


class CpuMeter:
    """CPU% of this process between calls (100 = one core)."""

    def __init__(self) -> None:
        self.proc = psutil.Process()
        self.last = self._now()

    def _now(self) -> tuple[float, float]:
        t = self.proc.cpu_times()
        return time.monotonic(), t.user + t.system

    def lap(self) -> float:
        now = self._now()
        (w0, c0), (w1, c1) = self.last, now
        self.last = now
        return round(100 * (c1 - c0) / max(w1 - w0, 1e-9), 1)


def emit(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def run_phases(
    spec: StepSpec,
    recorder: Recorder,
    extra_tick: Callable[[], dict[str, Any]] = dict,
) -> dict[str, Any]:
    """Settle (nothing recorded), then measure exactly `duration_s`, one tick line per second.

    The load is already running when this is called and is stopped by the caller afterwards.
    `extra_tick` adds a generator's own per-second figures (open loop: dropped, in flight).
    Returns the result line's common part; the `.hlog` is written if the spec asks for one.
    """
    with contextlib.ExitStack() as stack:
        if spec.hlog:
            recorder.sink = stack.enter_context(hist.HlogWriter(Path(spec.hlog))).write
        return _settle_and_measure(spec, recorder, extra_tick)


def _settle_and_measure(
    spec: StepSpec, recorder: Recorder, extra_tick: Callable[[], dict[str, Any]]
) -> dict[str, Any]:
    cpu = CpuMeter()
    t0 = time.monotonic()
    settle_end = t0 + spec.settle_s
    while (now := time.monotonic()) < settle_end:
        gevent.sleep(min(1.0, settle_end - now))
        emit({"type": "tick", "phase": "settle", "t": round(time.monotonic() - t0, 2),
              "client_cpu_pct": cpu.lap(), **recorder.live()})  # fmt: skip

    started_at = datetime.now(UTC).isoformat(timespec="milliseconds")
    emit({"type": "measure", "started_at": started_at})
    cpu.lap()
    recorder.measuring = True
    start = time.monotonic()
    end = start + spec.duration_s
    ticks: list[dict[str, Any]] = []
    tick_start = start
    while tick_start < end - 1e-3:
        gevent.sleep(max(0.0, min(tick_start + 1.0, end) - time.monotonic()))
        now = time.monotonic()
        tick = recorder.roll(tick_start - start, now - start)
        tick.update(t=round(now - start, 2), client_cpu_pct=cpu.lap(), **extra_tick())
        ticks.append(tick)
        emit({"type": "tick", "phase": "measure", **tick, **recorder.live()})
        tick_start = now
    recorder.measuring = False
    measured_s = time.monotonic() - start

    cpu_series = [t["client_cpu_pct"] for t in ticks]
    return {
        "type": "result",
        "started_at": started_at,
        "duration_s": round(measured_s, 3),
        "requests": recorder.requests,
        "ok": recorder.ok,
        "errors": dict(recorder.errors),
        "latency_ms": hist.summary_ms(recorder.whole),
        "client_cpu_pct": round(sum(cpu_series) / len(cpu_series), 1) if cpu_series else 0.0,
        "timeseries": {key: [t[key] for t in ticks] for key in ticks[0]} if ticks else {},
    }
