"""One load step, in its own process: locust users against one URL, latency into HdrHistogram.

Run as `python -m loadgen.worker SPEC_JSON`. It runs in a process of its own because importing
locust monkey-patches the importing process with gevent, and because the lab measures this
process's CPU to tell when the load generator, not the server, was the limit.

Phases: spawn all users, settle (connections open, nothing recorded), measure for exactly the
window (every completed request's latency recorded from locust's request event), stop. It prints
one JSON line per second (`{"type": "tick", ...}`) so the lab can show live progress, then one
`{"type": "result", ...}` line, and writes the per-second histograms as an `.hlog`.
"""

from gevent import monkey

monkey.patch_all()  # before anything imports socket; locust would do this on import anyway

import json  # noqa: E402
import logging  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections import Counter  # noqa: E402
from dataclasses import asdict, dataclass  # noqa: E402
from datetime import UTC, datetime  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import gevent  # noqa: E402
import psutil  # noqa: E402
from hdrh.histogram import HdrHistogram  # noqa: E402
from locust import FastHttpUser, constant, task  # noqa: E402
from locust.env import Environment  # noqa: E402

from loadgen import hist  # noqa: E402
from loadgen.errors import classify  # noqa: E402


@dataclass(frozen=True)
class StepSpec:
    """What one step asks of the load generator."""

    base_url: str  # e.g. http://127.0.0.1:18080
    path: str  # e.g. /io
    users: int  # closed loop: simultaneous users, each sending its next request on a response
    settle_s: float  # after spawning, before measuring: excluded from every figure
    duration_s: float  # the measured window
    timeout_s: float  # per request
    expected_body: str | None = None  # a 2xx with another body counts as a "bad_body" error
    hlog: str | None = None  # where to write the histograms; None for a warm-up
    mode: str = "closed"

    @classmethod
    def from_json(cls, text: str) -> "StepSpec":
        return cls(**json.loads(text))

    def to_json(self) -> str:
        return json.dumps(asdict(self))


class Recorder:
    """Listens to locust's request event; keeps one histogram and error counter per second."""

    def __init__(self, expected: bytes | None) -> None:
        self.expected = expected
        self.measuring = False
        self.interval = hist.new_histogram()
        self.interval_requests = 0
        self.interval_errors: Counter[str] = Counter()
        self.intervals: list[tuple[float, float, HdrHistogram]] = []
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
        self.intervals.append((start, end, done))
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


def user_class(spec: StepSpec) -> type[FastHttpUser]:
    class LabUser(FastHttpUser):
        host = spec.base_url
        wait_time = constant(0)  # closed loop, no think time: like `ab -c N`
        network_timeout = spec.timeout_s
        connection_timeout = spec.timeout_s

        @task
        def hit(self) -> None:
            self.client.get(spec.path, name=spec.path)

    return LabUser


def run_closed(spec: StepSpec) -> dict[str, Any]:
    recorder = Recorder(spec.expected_body.encode() if spec.expected_body is not None else None)
    env = Environment(user_classes=[user_class(spec)])
    env.events.request.add_listener(recorder.on_request)
    runner = env.create_local_runner()
    runner.start(spec.users, spawn_rate=spec.users)
    cpu = CpuMeter()
    t0 = time.monotonic()
    settle_end = t0 + spec.settle_s
    while (now := time.monotonic()) < settle_end:
        gevent.sleep(min(1.0, settle_end - now))
        emit(
            {
                "type": "tick",
                "phase": "settle",
                "t": round(time.monotonic() - t0, 2),
                "live_requests": recorder.live_requests,
                "live_errors": recorder.live_errors,
                "client_cpu_pct": cpu.lap(),
            }
        )

    started_at = datetime.now(UTC).isoformat(timespec="milliseconds")
    emit({"type": "measure", "started_at": started_at})
    cpu.lap()
    recorder.measuring = True
    start = time.monotonic()
    end = start + spec.duration_s
    ticks: list[dict[str, Any]] = []
    tick_start = start
    while tick_start < end - 1e-3:
        tick_end = min(tick_start + 1.0, end)
        gevent.sleep(max(0.0, tick_end - time.monotonic()))
        now = time.monotonic()
        tick = recorder.roll(tick_start - start, now - start)
        tick.update(t=round(now - start, 2), client_cpu_pct=cpu.lap())
        ticks.append(tick)
        emit(
            {
                "type": "tick",
                "phase": "measure",
                **tick,
                "live_requests": recorder.live_requests,
                "live_errors": recorder.live_errors,
            }
        )
        tick_start = now
    recorder.measuring = False
    measured_s = time.monotonic() - start
    runner.quit()

    whole = hist.merge(h for _, _, h in recorder.intervals)
    if spec.hlog:
        hist.write_hlog(Path(spec.hlog), recorder.intervals)
    cpu_series = [t["client_cpu_pct"] for t in ticks]
    return {
        "type": "result",
        "started_at": started_at,
        "duration_s": round(measured_s, 3),
        "requests": recorder.requests,
        "ok": recorder.ok,
        "errors": dict(recorder.errors),
        "latency_ms": hist.summary_ms(whole),
        "client_cpu_pct": round(sum(cpu_series) / len(cpu_series), 1) if cpu_series else 0.0,
        "timeseries": {
            key: [t[key] for t in ticks]
            for key in ("t", "rps", "errors", "p50_ms", "p99_ms", "client_cpu_pct")
        },
    }


RUNNERS = {"closed": run_closed}


def main() -> None:
    logging.basicConfig(level=logging.ERROR, stream=sys.stderr)
    spec = StepSpec.from_json(sys.argv[1])
    emit(RUNNERS[spec.mode](spec))


if __name__ == "__main__":
    main()
