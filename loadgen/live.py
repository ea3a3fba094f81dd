"""Live per-model recording inside locust: HdrHistograms per second, errors by kind, segments.

Why: locust's own statistics round percentiles and mix every model's client view; the lab page
and the saved result need the lab's figures (full HdrHistograms, classified errors) per model.
A *segment* is the stretch between two moments the user count settles (locust's
`spawning_complete`) or the test stops: its per-model figures become one step of a result, with
the ramp-up excluded, and its seconds are written to an `.hlog` as they pass.

Distributed (Compose: a master and workers), the requests happen on the workers: each keeps its
own `ModelIntervals` and answers the master's once-a-second roll with them (`loadgen.fanout`);
the master adds them to its recorder, so its figures merge counts, never percentiles.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hdrh.histogram import HdrHistogram

from lab.record import hist
from loadgen.client.errors import classify
from loadgen.protocol import Window
from loadgen.recording import Interval
from loadgen.request import model_of

LIVE_WINDOW_S = 5  # the lab page's figures are over the last seconds, like locust's current rps


@dataclass
class Track:
    """One model in the running segment."""

    users: int
    hlog: hist.HlogWriter
    hlog_path: Path
    whole: HdrHistogram = field(default_factory=hist.new_histogram)
    requests: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    ticks: list[dict[str, float]] = field(default_factory=list)


@dataclass(frozen=True)
class Segment(Window):
    """One model's finished (or snapshotted) segment: the makings of one step."""

    model: str
    users: int
    hlog_path: Path
    timeseries: dict[str, list[float]]


class ModelIntervals:
    """The running second's Interval per model, fed by locust's request event or by workers."""

    def __init__(self) -> None:
        self.current: dict[str, Interval] = {}

    def on_request(
        self,
        name: str,
        response_time: float,
        response: Any = None,
        exception: BaseException | None = None,
        **_: Any,
    ) -> None:
        status = getattr(response, "status_code", 0) or 0
        kind = classify(exception, status, None, None)
        self._of(model_of(name)).record(kind, response_time)

    def add(self, model: str, part: Interval) -> None:
        """Count another process's interval (a worker's) into this second's."""
        interval = self._of(model)
        interval.hist.add(part.hist)
        interval.requests += part.requests
        interval.errors.update(part.errors)

    def _of(self, model: str) -> Interval:
        """The model's running Interval, made on its first request only (a new HdrHistogram
        costs ~0.1 ms: `setdefault` would pay that on every request)."""
        interval = self.current.get(model)
        if interval is None:
            interval = self.current[model] = Interval()
        return interval

    def take(self) -> dict[str, Interval]:
        """End the running second: its Interval per model."""
        done, self.current = self.current, {}
        return done


class LiveRecorder:
    """Listens to locust's request event; `roll()` once a second closes the current interval."""

    def __init__(self, work_dir: Path, clock: Callable[[], float]) -> None:
        self.work_dir = work_dir
        self.clock = clock
        self.intervals = ModelIntervals()
        self.on_request = self.intervals.on_request
        self.window: dict[str, deque[tuple[HdrHistogram, int, float]]] = {}
        self.tracks: dict[str, Track] = {}
        self.segment_start = 0.0
        self.segment_started_at = ""
        self.last_roll = clock()
        self.done: list[Segment] = []
        self.counter = 0  # numbers the hlog files of successive segments

    def roll(self, extra: Callable[[str], dict[str, float]]) -> None:
        """Close one interval per model: into the live window and the running segment."""
        now = self.clock()
        span = max(now - self.last_roll, 1e-9)
        intervals = self.intervals.take()
        for model in set(intervals) | set(self.tracks):
            done = intervals.get(model) or Interval()
            errors = sum(done.errors.values())
            window = self.window.setdefault(model, deque(maxlen=LIVE_WINDOW_S))
            window.append((done.hist, errors, span))
            if (track := self.tracks.get(model)) is not None:
                self._into(track, done, now, span, extra(model))
        self.last_roll = now

    def _into(
        self, track: Track, done: Interval, now: float, span: float, extra: dict[str, float]
    ) -> None:
        start = self.last_roll - self.segment_start
        track.hlog.write(max(start, 0.0), now - self.segment_start, done.hist)
        track.whole.add(done.hist)
        track.requests += done.requests
        track.errors.update(done.errors)
        summary = hist.summary_ms(done.hist)
        track.ticks.append(
            {
                "t": round(now - self.segment_start, 2),
                "rps": round(done.hist.get_total_count() / span, 1),
                "errors": sum(done.errors.values()),
                "p50_ms": summary["p50"],
                "p99_ms": summary["p99"],
                **extra,
            }
        )

    def live(self, model: str) -> dict[str, float]:
        """rps, errors/s, p50 and p99 over the last few seconds of one model."""
        window = list(self.window.get(model, ()))
        seconds = sum(s for _, _, s in window) or 1.0
        merged = hist.merge(h for h, _, _ in window)
        summary = hist.summary_ms(merged)
        return {
            "rps": round(merged.get_total_count() / seconds, 1),
            "errors_per_s": round(sum(e for _, e, _ in window) / seconds, 1),
            "p50_ms": summary["p50"],
            "p99_ms": summary["p99"],
        }

    def begin(self, users: dict[str, int]) -> None:
        """Close the running segment and start one with these users per model."""
        self.finish()
        self.segment_start = self.clock()
        self.segment_started_at = datetime.now(UTC).isoformat(timespec="milliseconds")
        self.counter += 1
        for model, n in users.items():
            if n > 0:
                path = self.work_dir / f"{model}-{self.counter}.hlog"
                self.tracks[model] = Track(n, hist.HlogWriter(path), path)

    def finish(self) -> None:
        self.done += self.snapshot()
        for track in self.tracks.values():
            track.hlog.close()
        self.tracks = {}

    def snapshot(self) -> list[Segment]:
        """The running segment's figures so far, without closing it."""
        duration = self.last_roll - self.segment_start
        return [
            _segment(m, t, self.segment_started_at, duration)
            for m, t in self.tracks.items()
            if t.ticks
        ]


def _segment(model: str, track: Track, started_at: str, duration: float) -> Segment:
    ok = track.whole.get_total_count()
    series = {key: [t.get(key, 0.0) for t in track.ticks] for key in track.ticks[0]}
    return Segment(
        started_at,
        round(duration, 3),
        track.requests,
        ok,
        dict(track.errors),
        hist.summary_ms(track.whole),
        model,
        track.users,
        track.hlog_path,
        series,
    )
