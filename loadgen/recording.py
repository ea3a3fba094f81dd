"""What every load-generator process shares: recording requests and the settle/measure phases.

Imported only by the generator processes, which have monkey-patched with gevent before this.

The instrument measures itself as it measures the server: a probe on each generator's event loop
records how late its timers fire (`LoopLag`), and the time the generator spends in its own
once-a-second work is counted, so a step knows when the generator, not the server, made its tail.
"""

from __future__ import annotations

import math
import sys
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import gevent
import psutil
from hdrh.histogram import HdrHistogram

from lab.record import hist
from loadgen.client.errors import classify
from loadgen.protocol import ANSWER_TICK_S, Histogram, Message, encode
from loadgen.request import RouteTally

LAG_TICK_MS = 5.0  # the loop-lag probe's timer: short beside any stall that matters, cheap


@dataclass
class Interval:
    """What one generator process measured since its last interval ended."""

    hist: HdrHistogram = field(default_factory=hist.new_histogram)
    requests: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    bounds: int = 0  # lower bounds (unfinished open-loop requests' ages) in `hist`
    lag: HdrHistogram | None = None  # the process's loop lag over the interval (None: unknown)
    periodic_s: float = 0.0  # the process's own periodic work since its last interval
    # Failed requests' latency by kind, from their start (open loop: intended start); "dropped":
    # open-loop arrivals the cap kept back, a lower bound (`loadgen.open_loop`).
    failed: dict[str, HdrHistogram] = field(default_factory=dict)
    # Open loop: each measured send's lateness (actual send - intended), per request.
    late_sends: HdrHistogram | None = None
    # Answers that arrived in this second, whenever they were sent (None: not counted, e.g. a
    # web-UI worker's interval): the per-second throughput, where the histogram keeps only the
    # requests sent (closed loop) or due (open loop) inside the window.
    answers: int | None = None
    routes: dict[str, RouteTally] = field(default_factory=dict)  # a mix: each route's requests
    # Answers by the ANSWER_TICK_S bin of the window they arrived in (bin 0 opens the window; on
    # several processes each counts from the step's common start): a pause shorter than a second
    # is seen in these, never in the per-second `answers`.
    ticks: Counter[int] = field(default_factory=Counter)

    def record(self, kind: str | None, latency_ms: float) -> None:
        """One request that ended: an answer's latency, or a failure's under its kind. The one
        place a classified request is recorded (the lab's generators and the lab page's)."""
        self.requests += 1
        if kind is None:
            hist.record_ms(self.hist, latency_ms)
        else:
            self.errors[kind] += 1
            self.record_failed(kind, latency_ms)

    def record_failed(self, kind: str, latency_ms: float) -> None:
        """One failed request's latency, into its kind's histogram (made on first use: a new
        HdrHistogram costs ~0.1 ms, a healthy step never pays it)."""
        h = self.failed.get(kind)
        if h is None:
            h = self.failed[kind] = hist.new_histogram()
        hist.record_ms(h, latency_ms)


def merge_failed(
    into: dict[str, HdrHistogram], parts: Iterable[Mapping[str, HdrHistogram]]
) -> None:
    """Failed requests' histograms added into `into`, kind by kind (exact, like every merge)."""
    for part in parts:
        for kind, h in part.items():
            into.setdefault(kind, hist.new_histogram()).add(h)


def merge_routes(into: dict[str, RouteTally], parts: Iterable[Mapping[str, RouteTally]]) -> None:
    """A mix's routes added into `into`, route by route (exact, like every merge)."""
    for part in parts:
        for name, tally in part.items():
            into.setdefault(name, RouteTally()).add(tally)


def merged(intervals: list[Interval]) -> Interval:
    """Several intervals as one: counts added, histograms merged exactly (the loop lags, the
    failures and the sends' lateness too)."""
    lags = [i.lag for i in intervals if i.lag is not None]
    late = [i.late_sends for i in intervals if i.late_sends is not None]
    answers = [i.answers for i in intervals]
    failed: dict[str, HdrHistogram] = {}
    merge_failed(failed, (i.failed for i in intervals))
    routes: dict[str, RouteTally] = {}
    merge_routes(routes, (i.routes for i in intervals))
    return Interval(
        hist.merge(i.hist for i in intervals),
        sum(i.requests for i in intervals),
        sum((i.errors for i in intervals), Counter[str]()),
        sum(i.bounds for i in intervals),
        hist.merge(lags) if lags else None,
        sum(i.periodic_s for i in intervals),
        failed,
        hist.merge(late) if late else None,
        None if None in answers else sum(filter(None, answers)),
        routes=routes,
        ticks=sum((i.ticks for i in intervals), Counter[int]()),
    )


class LoopLag:
    """How late a timer on this process's event loop fires: the generator's own stalls.

    A greenlet sleeps LAG_TICK_MS over and over and records how late it woke. Each lateness is
    recorded with HdrHistogram's correction for the expected interval: a stall of S ms also counts
    the S / tick timers that would have fired during it, so the percentiles are over time (how late
    the loop was for an event at a random moment: an answer arriving, a send falling due), and a
    stall is weighed by its length, not counted once.

    Read per request: an answer arriving while the loop is X ms late waits X ms more, so the share
    of the time the loop was at least X late is the share of answers a stall delayed by X or more
    (answers arrive throughout the window; `lab.record.counted`). A stall shorter than the tick
    is seen only when a timer falls due inside it, as often as an answer would. Open-loop sends
    are counted one by one instead (`Interval.late_sends`).
    """

    def __init__(self) -> None:
        self.interval = hist.new_histogram()
        self.greenlet = gevent.spawn(self._run)

    def _run(self) -> None:
        tick_s = LAG_TICK_MS / 1000
        while True:
            before = time.perf_counter()
            gevent.sleep(tick_s)
            late_ms = (time.perf_counter() - before - tick_s) * 1000
            hist.record_corrected_ms(self.interval, late_ms, LAG_TICK_MS)

    def take(self) -> HdrHistogram:
        done, self.interval = self.interval, hist.new_histogram()
        return done


class Recorder:
    """Listens to locust's request event; keeps one histogram and error counter per second."""

    def __init__(
        self,
        expected: bytes | None,
        routes: frozenset[str] = frozenset(),
        expect: Mapping[str, frozenset[int]] | None = None,
    ) -> None:
        self.expected = expected
        self.route_names = routes  # a mix: the request names kept apart (`Picker.names`)
        self.expect = dict(expect or {})  # a route's statuses that count as success
        self.routes: dict[str, RouteTally] = {}  # and their measured requests, every second's
        self.measuring = False
        self.opened_at = math.inf  # perf_counter when the measured window opened
        self.interval = Interval(answers=0)
        self.whole = hist.new_histogram()  # every measured second merged
        self.errors: Counter[str] = Counter()
        self.requests = 0
        self.ok = 0
        self.live_requests = 0  # every completion, measured or not, for the progress display
        self.live_errors = 0
        self.failed: dict[str, HdrHistogram] = {}  # every measured second's failures, by kind
        self.late_sends = hist.new_histogram()  # open loop: measured sends' lateness
        self.loop_lag = LoopLag()
        self.periodic_s = 0.0  # own periodic work not yet handed on in an interval
        self.lags: dict[str, HdrHistogram] = {}  # per source: its loop lag, measured seconds
        self.ticks: Counter[int] = Counter()  # every process's answers per ANSWER_TICK_S bin
        self.busy_s: Counter[str] = Counter()  # per source: its periodic work, measured seconds
        self.logins = RouteTally()  # a login step: every user's, whenever it ran (never the mix's)

    def on_request(
        self,
        response_time: float,
        response: Any = None,
        exception: BaseException | None = None,
        measured: bool | None = None,
        **_: Any,
    ) -> str | None:
        """`measured`: whether the request counts, when the caller knows better than the clock
        (open loop: it was due inside the measured window, whenever it completes). Returns its
        error kind (None: ok)."""
        status = getattr(response, "status_code", 0) or 0
        if exception is None and status < 400 and self.expected is None:
            kind = None  # what `classify` says, without reading the body nobody checks
        else:
            content = getattr(response, "content", None) if exception is None else None
            kind = classify(exception, status, content, self.expected)
        if self.expect and status and (codes := self.expect.get(_.get("name", ""))):
            kind = None if status in codes else classify(None, status, None, None) or "other"
        self.live_requests += 1
        self.live_errors += kind is not None
        if self.measuring and kind is None and self.interval.answers is not None:
            self.interval.answers += 1
            self.interval.ticks[
                int((time.perf_counter() - self.opened_at) * (1 / ANSWER_TICK_S))
            ] += 1
        if not (self.measuring if measured is None else measured):
            return kind
        self.interval.record(kind, response_time)
        if self.route_names and (name := _.get("name", "")) in self.route_names:
            self.interval.routes.setdefault(name, RouteTally()).record(kind, response_time)
        return kind

    def take(self) -> Interval:
        """End the current interval and start the next one; it carries the loop's lag and the
        periodic work since the last one."""
        done, self.interval = self.interval, Interval(answers=0)
        done.lag, done.periodic_s, self.periodic_s = self.loop_lag.take(), self.periodic_s, 0.0
        return done

    def refresh(self) -> None:
        """Once a second while settling; a recorder fed by other processes asks them here."""

    def bound(self, age_ms: float, name: str = "") -> None:
        """An unfinished request's age at the cut-off: its latency is at least this. `name`:
        its route, counted in a mix's route as unfinished."""
        hist.record_ms(self.interval.hist, age_ms)
        self.interval.bounds += 1
        if name in self.route_names:
            self.interval.routes.setdefault(name, RouteTally()).bound()

    def roll(self, start: float, end: float, drain: bool = False) -> dict[str, Any]:
        """Close the current one-second interval (or the drain), send its histogram; return
        its figures."""
        return self.account(start, end, {"": self.take()}, drain)

    def account(
        self, start: float, end: float, parts: Mapping[str, Interval], drain: bool = False
    ) -> dict[str, Any]:
        """Send each part's histogram (one per generator process), add them all to the step's
        totals and return the second's figures, from the exactly merged histogram. Lower bounds
        (unfinished open-loop requests' ages) are in the histogram but not counted as ok."""
        merged = hist.merge(p.hist for p in parts.values())
        for source, part in parts.items():
            encoded = hist.encode(part.hist)
            emit(Histogram(round(start, 3), round(end, 3), encoded, source, drain))
        errors = sum((p.errors for p in parts.values()), Counter[str]())
        self.whole.add(merged)
        self.requests += sum(p.requests for p in parts.values())
        self.ok += merged.get_total_count() - sum(p.bounds for p in parts.values())
        self.errors.update(errors)
        merge_failed(self.failed, (p.failed for p in parts.values()))
        merge_routes(self.routes, (p.routes for p in parts.values()))
        for p in parts.values():
            self.ticks.update(p.ticks)
        summary = hist.summary_ms(merged)
        if not merged.get_total_count():  # no answer this second: no latency, not 0 ms
            summary = {**summary, "p50": math.nan, "p99": math.nan}
        span = max(end - start, 1e-9)
        counted = [p.answers for p in parts.values()]
        answers = merged.get_total_count() if None in counted else sum(filter(None, counted))
        return {
            "rps": round(answers / span, 1),
            "errors": sum(errors.values()),
            "p50_ms": summary["p50"],
            "p99_ms": summary["p99"],
            **self._lag(parts),
        }

    def _lag(self, parts: Mapping[str, Interval]) -> dict[str, float]:
        """Each process's loop lag and periodic work into the step's (while measuring); the
        second's lag over every process, merged exactly like the latencies."""
        lags = {source: p.lag for source, p in parts.items() if p.lag is not None}
        if self.measuring:
            for source, lag in lags.items():
                self.lags.setdefault(source, hist.new_histogram()).add(lag)
            for p in parts.values():
                if p.late_sends is not None:
                    self.late_sends.add(p.late_sends)
            self.busy_s.update({s: p.periodic_s for s, p in parts.items()})
        second = hist.summary_ms(hist.merge(lags.values()))
        return {"lag_p99_ms": second["p99"], "lag_max_ms": second["max"]}

    def latency(self) -> dict[str, Any]:
        """The step's latency figures: ok requests (`latency_ms`, open loop: unfinished ages
        included), failed ones by kind, every request together (`all_latency_ms`), and what the
        generator's own error per request is read from (its loop lag, its sends' lateness)."""
        everything = hist.merge([self.whole, *self.failed.values()])
        late = self.late_sends
        return {
            "latency_ms": hist.summary_ms(self.whole),
            "failed_latency_ms": {k: hist.summary_ms(h) for k, h in sorted(self.failed.items())},
            "all_latency_ms": hist.summary_ms(everything),
            "lag": hist.encode(hist.merge(self.lags.values())) if self.lags else "",
            "late_sends": hist.encode(late) if late.get_total_count() else "",
        }

    def answers_per_tick(self, window_s: float) -> list[int]:
        """The window's answers per ANSWER_TICK_S bin, every process's added (`Done`)."""
        n = int(window_s / ANSWER_TICK_S + 1e-6)  # whole bins: a last sliver would look quiet
        return [self.ticks.get(i, 0) for i in range(n)]

    def route_figures(self) -> dict[str, dict[str, Any]]:
        """A mix: each route's measured requests, as `Done.routes` carries them."""
        return {name: tally.figures() for name, tally in sorted(self.routes.items())}

    def login_figures(self) -> dict[str, Any]:
        """Every user's login, counted and timed apart ({}: none ran), as `Done.login`."""
        return self.logins.figures() if self.logins.requests else {}

    def lag_ms(self) -> dict[str, float]:
        """The step's loop lag, every generator process's merged: p50, p99, max, mean (ms)."""
        return lag_figures(hist.merge(self.lags.values()))

    def periodic_pct(self, window_s: float, source: str | None = None) -> float:
        """Share of the window a process (the busiest, without `source`) spent in its own
        periodic work: rolling seconds, summarising, encoding, reporting."""
        busy = self.busy_s[source] if source is not None else max(self.busy_s.values(), default=0)
        return round(100 * busy / max(window_s, 1e-9), 3)


def lag_figures(lag: HdrHistogram) -> dict[str, float]:
    summary = hist.summary_ms(lag)
    return {k: summary[k] for k in ("p50", "p99", "max", "mean")}


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
