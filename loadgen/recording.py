"""What every load-generator process shares: recording requests and the settle/measure phases.

Imported only by the generator processes, which have monkey-patched with gevent before this.
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

import gevent
import psutil
from hdrh.histogram import HdrHistogram

from lab.record import hist
from loadgen.errors import classify
from loadgen.protocol import Done, Histogram, Measuring, Message, Sample, Start, encode

SAMPLE_SERIES = ("t", "rps", "errors", "p50_ms", "p99_ms", "client_cpu_pct")  # in Done.timeseries
OPEN_LOOP_SERIES = ("dropped", "inflight")


@dataclass
class Interval:
    """What one generator process measured since its last interval ended."""

    hist: HdrHistogram = field(default_factory=hist.new_histogram)
    requests: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    bounds: int = 0  # lower bounds (unfinished open-loop requests' ages) in `hist`


class Recorder:
    """Listens to locust's request event; keeps one histogram and error counter per second."""

    def __init__(self, expected: bytes | None) -> None:
        self.expected = expected
        self.measuring = False
        self.interval = Interval()
        self.whole = hist.new_histogram()  # every measured second merged
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
        measured: bool | None = None,
        **_: Any,
    ) -> None:
        """`measured`: whether the request counts, when the caller knows better than the clock
        (open loop: it was due inside the measured window, whenever it completes)."""
        status = getattr(response, "status_code", 0) or 0
        content = getattr(response, "content", None) if exception is None else None
        kind = classify(exception, status, content, self.expected)
        self.live_requests += 1
        self.live_errors += kind is not None
        if not (self.measuring if measured is None else measured):
            return
        self.interval.requests += 1
        if kind is None:
            hist.record_ms(self.interval.hist, response_time)
        else:
            self.interval.errors[kind] += 1

    def take(self) -> Interval:
        """End the current interval and start the next one."""
        done, self.interval = self.interval, Interval()
        return done

    def refresh(self) -> None:
        """Once a second while settling; a recorder fed by other processes asks them here."""

    def bound(self, age_ms: float) -> None:
        """An unfinished request's age at the cut-off: its latency is at least this."""
        hist.record_ms(self.interval.hist, age_ms)
        self.interval.bounds += 1

    def roll(self, start: float, end: float) -> dict[str, Any]:
        """Close the current one-second interval, send its histogram; return its figures."""
        return self.account(start, end, {"": self.take()})

    def account(self, start: float, end: float, parts: Mapping[str, Interval]) -> dict[str, Any]:
        """Send each part's histogram (one per generator process), add them all to the step's
        totals and return the second's figures, from the exactly merged histogram. Lower bounds
        (unfinished open-loop requests' ages) are in the histogram but not counted as ok."""
        merged = hist.merge(p.hist for p in parts.values())
        for source, part in parts.items():
            emit(Histogram(round(start, 3), round(end, 3), hist.encode(part.hist), source))
        errors = sum((p.errors for p in parts.values()), Counter[str]())
        self.whole.add(merged)
        self.requests += sum(p.requests for p in parts.values())
        self.ok += merged.get_total_count() - sum(p.bounds for p in parts.values())
        self.errors.update(errors)
        summary = hist.summary_ms(merged)
        span = max(end - start, 1e-9)
        return {
            "rps": round(merged.get_total_count() / span, 1),
            "errors": sum(errors.values()),
            "p50_ms": summary["p50"],
            "p99_ms": summary["p99"],
        }


class Meter(Protocol):
    def lap(self) -> float: ...


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


def emit(message: Message) -> None:
    sys.stdout.write(encode(message) + "\n")
    sys.stdout.flush()


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
    _settle(start, recorder, cpu)
    started_at = datetime.now(UTC).isoformat(timespec="milliseconds")
    emit(Measuring(started_at))
    cpu.lap()
    recorder.measuring = True
    t0 = time.monotonic()
    samples = _measure(start, recorder, cpu, extra_sample)
    recorder.measuring = False
    cpu_series = [s.client_cpu_pct for s in samples]
    keys = SAMPLE_SERIES + (OPEN_LOOP_SERIES if start.mode == "open" else ())
    return Done(
        started_at=started_at,
        duration_s=round(time.monotonic() - t0, 3),
        requests=recorder.requests,
        ok=recorder.ok,
        errors=dict(recorder.errors),
        latency_ms=hist.summary_ms(recorder.whole),
        client_cpu_pct=round(sum(cpu_series) / len(cpu_series), 1) if cpu_series else 0.0,
        timeseries={k: [getattr(s, k) for s in samples] for k in keys} if samples else {},
    )


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
    return samples
