"""Open-loop load on locust: requests start on a schedule, whatever earlier responses are doing.

Runs inside the generator process (`python -m loadgen`) for a `Start` with a `rate_rps`; its
`Done` carries open-loop figures too (target and achieved arrival rate, dropped, unfinished).

Locust's users are closed loop: each user sends its next request only when the last one answered,
so when the server stalls the load generator stalls with it and the slow period is recorded as a
handful of slow requests instead of the many that real users would have sent (coordinated
omission). Here one scheduler greenlet issues request i at its intended time (constant spacing
1/rate, or Poisson arrivals), each on locust's FastHttpSession (so locust's request event, error
handling and connection pool are used), and latency is measured from that intended time, not
from when the request could actually be sent. At most `max_outstanding` requests are outstanding
(the cap, one pooled connection each); a request whose intended time comes while the cap is full is
not sent and is counted as dropped, so overload shows as drops and latency, never as a lower rate.

No survivor bias: a request counts when it was *due* inside the measured window, whenever it
answers. After the window the generator stops scheduling and waits for the window's requests
(at most DRAIN_MAX_S, and never beyond the request timeout); each one still unanswered then is
recorded with its age at the cut-off, a lower bound of its latency, so percentiles past that
age are lower bounds too (`lower_bounds`, shown as ">=") instead of the slowest requests
silently vanishing. Throughput stays what answered inside the window.

On several generator processes (`loadgen.open_fleet`) each worker runs an `OpenLoop` on its own
share of the arrivals (`loadgen.shares`) with `run_share`: the same schedule, window and drain,
timed from the step's common start instead of by `run_phases`.
"""

from __future__ import annotations

import random
import time
from collections import deque
from collections.abc import Mapping
from typing import Any

import gevent
from gevent.pool import Group
from locust.event import EventHook

from lab.record import hist
from loadgen.phases import after_drain, common_begin, drain_pending, run_phases, share_window
from loadgen.protocol import Done, OpenLoopFigures, Start
from loadgen.recording import Recorder
from loadgen.request import Picker
from loadgen.session import User, lab_session, new_users
from loadgen.shares import intended_offsets, lower_bounds
from loadgen.timer import DueTimer


class OpenLoop:
    """The scheduler and its counters; latency goes to a Recorder as in the closed loop."""

    def __init__(self, spec: Start) -> None:
        self.spec = spec
        self.picker = Picker(spec, spec.seed)  # the step's route, or a mix's drawn by weight
        expected = spec.expected_body.encode() if spec.expected_body is not None else None
        self.recorder = Recorder(expected, self.picker.names, self.picker.expect)
        self.service = hist.new_histogram()  # send-to-answer time, what closed loop would show
        self.events = EventHook()
        self.events.add_listener(self.on_request)
        # anonymous: one session, a pooled connection per request in flight; with a login, one
        # logged-in user per request in flight (`log_in_users`), each taken while it is sent
        self.shared = User(lab_session(spec, self.events, spec.max_outstanding))
        self.free: deque[User] = deque()  # taken in turn: every session sends
        self.inflight = Group()
        self.started = 0  # requests sent while measuring
        self.first_sent = self.last_sent = 0.0  # perf_counter of the first and last of those
        self.dropped = 0  # requests due while measuring that the cap did not let start
        self.tick_dropped = 0
        self.arrivals = 0  # every send: the arrivals take turns over the cap's {user} numbers
        # the window's requests not answered yet: when each was due, and its route
        self.pending: dict[int, tuple[float, str]] = {}
        self.completed = 0  # the window's requests answered (ok or failed)
        self.ok_in_window = 0
        self.unfinished = 0  # still unanswered at the cut-off
        self.lower_bound_floor: float | None = None  # the youngest unfinished request's age, ms
        # Dropped arrivals' intended times, oldest first: each is timed to the next slot that
        # frees (it could not have started before), or to the cut-off: a lower bound.
        self.waiting: deque[float] = deque()
        self.cut = False  # the drain's cut-off passed: nothing more is recorded
        self.dropped_floor: float | None = None  # the shortest such bound, ms

    def bound_dropped(self, now: float) -> None:
        """A slot freed: the oldest dropped arrival waited at least until now."""
        bound_ms = (now - self.waiting.popleft()) * 1000
        self.recorder.interval.record_failed("dropped", bound_ms)
        floor = self.dropped_floor
        self.dropped_floor = bound_ms if floor is None else min(floor, bound_ms)

    def on_request(self, response_time: float, context: dict[str, Any], **kw: Any) -> None:
        if self.cut:  # an answer after the cut-off: its age is already recorded, once
            return
        now = time.perf_counter()
        from_intended_ms = (now - context["intended"]) * 1000
        measured = bool(context["measured"])
        kind = self.recorder.on_request(response_time=from_intended_ms, measured=measured, **kw)
        ok = kind is None  # a wrong body is no answer, in the window or not
        self.ok_in_window += ok and self.recorder.measuring  # whenever it was due
        if measured:
            self.completed += 1
            if ok:
                hist.record_ms(self.service, response_time)
        if self.waiting:
            self.bound_dropped(now)

    def send(self, intended: float, measured: bool) -> None:
        token = id(gevent.getcurrent())
        self.arrivals += 1
        number = self.spec.user_base + self.arrivals % max(1, self.spec.max_outstanding)
        req = self.picker.next(number)
        user = self.free.popleft() if self.free else self.shared
        headers, name = user.headers(req), req.name or req.path
        if measured:
            self.pending[token] = (intended, name)
        try:
            context = {"intended": intended, "measured": measured}
            user.session.request(
                req.method, req.path, name=name, data=req.body, headers=headers, context=context
            )
        finally:
            self.pending.pop(token, None)
            if user is not self.shared:
                self.free.append(user)

    def log_in_users(self) -> None:
        """A login step: one user per request the cap lets fly, each with its own session and
        connection, all logged in before the first arrival; nothing without one."""
        spec, tally = self.spec, self.recorder.logins
        if spec.login is not None:
            made = new_users(spec, self.events, tally, spec.max_outstanding, self.picker.source)
            self.free = deque(made)

    def schedule(self, start: float) -> None:
        """Issue requests at their intended times until killed; catch up at once when late.
        Each waits on a timerfd (`loadgen.timer`): sends leave within tens of microseconds of
        their due time, not libev's millisecond."""
        rng = random.Random(self.spec.seed)
        assert self.spec.rate_rps is not None
        offsets = intended_offsets(self.spec.rate_rps, self.spec.arrival, rng, self.spec.offset_s)
        timer = DueTimer()
        try:
            for offset in offsets:
                timer.sleep_until(start + offset)
                self.due(start + offset)
        finally:
            timer.close()

    def due(self, due: float) -> None:
        """The request due at `due` (now): sent, or dropped where the cap is full."""
        # in the window by its due time: one due before it opened and sent late is not
        measuring = self.recorder.measuring and due >= self.recorder.opened_at
        if len(self.inflight) >= self.spec.max_outstanding:
            if measuring:
                self.dropped += 1
                self.tick_dropped += 1
                self.waiting.append(due)
            return
        if measuring:
            self.count_send(due)
        self.inflight.spawn(self.send, due, measuring)

    def count_send(self, due: float) -> None:
        """A measured send and its lateness (a late one was delayed by this process itself)."""
        now = time.perf_counter()
        self.first_sent = self.first_sent or now
        self.last_sent = now
        self.started += 1
        interval = self.recorder.interval
        if interval.late_sends is None:
            interval.late_sends = hist.new_histogram()
        hist.record_ms(interval.late_sends, (now - due) * 1000)

    def tick(self) -> dict[str, int]:
        """This second's open-loop figures for the tick line."""
        dropped, self.tick_dropped = self.tick_dropped, 0
        return {"dropped": dropped, "inflight": len(self.inflight)}

    def achieved_rate(self) -> float:
        """Sends per second between the first and the last send of the window: the rate the
        server was offered, unaffected by how late the window's own timer woke up."""
        span = self.last_sent - self.first_sent
        return (self.started - 1) / span if self.started > 1 and span > 0 else 0.0

    def all_floor(self) -> float | None:
        """The shortest lower bound among every request (unfinished or dropped), ms."""
        floors = [f for f in (self.lower_bound_floor, self.dropped_floor) if f is not None]
        return min(floors) if floors else None

    def figures(
        self, latency: Mapping[str, float], drain_s: float, everything: Mapping[str, float]
    ) -> OpenLoopFigures:
        """This generator's open-loop figures; `latency` (ok requests) and `everything` (every
        request) mark which keys are lower bounds."""
        assert self.spec.rate_rps is not None
        return OpenLoopFigures(
            rate_rps=self.spec.rate_rps,
            achieved_rate_rps=round(self.achieved_rate(), 2),
            sent=self.started,
            dropped=self.dropped,
            unfinished=self.unfinished,
            service_latency_ms=hist.summary_ms(self.service),
            scheduled=self.started + self.dropped,
            completed=self.completed,
            not_sent=self.dropped,
            ok_in_window=self.ok_in_window,
            drain_s=round(drain_s, 3),
            lower_bounds=lower_bounds(latency, self.lower_bound_floor),
            all_lower_bounds=lower_bounds(everything, self.all_floor()),
            send_lateness_ms=hist.summary_ms(self.recorder.late_sends),
        )


def run_open(spec: Start) -> Done:
    if spec.rate_rps is None or spec.rate_rps <= 0:
        raise ValueError("open loop needs rate_rps > 0")
    loop = OpenLoop(spec)
    loop.log_in_users()
    scheduler = gevent.spawn(loop.schedule, time.perf_counter())
    try:
        done = run_phases(spec, loop.recorder, loop.tick)
        scheduler.kill()
        drain_s = drain(loop, spec)
        # the drained answers and the bounds go out as one more interval, tagged as the drain
        loop.recorder.roll(done.duration_s, done.duration_s + drain_s, drain=True)
    finally:
        scheduler.kill()
        loop.inflight.kill(block=True, timeout=5)
    latency = loop.recorder.latency()  # from each request's intended start, unfinished ages too
    figures = loop.figures(latency["latency_ms"], drain_s, latency["all_latency_ms"])
    return after_drain(done, loop.recorder, loop.unfinished, latency, open_loop=figures)


def run_share(loop: OpenLoop) -> float:
    """One generator's share of a step run by several (`loadgen.shares`): its schedule from the
    common start, its measured window timed by that same start (the master's rolls collect the
    intervals), then its drain. Returns how long the drain took. The sends already due when
    START came late leave at once and count as late (`send_lateness_ms`)."""
    loop.log_in_users()  # a login step: before the schedule (late sends then catch up)
    begin = common_begin(loop.spec)
    scheduler = gevent.spawn(loop.schedule, begin)
    try:
        share_window(loop.spec, loop.recorder, begin)
        scheduler.kill()
        return drain(loop, loop.spec)
    finally:
        scheduler.kill()
        loop.inflight.kill(block=True, timeout=5)


def drain(loop: OpenLoop, spec: Start) -> float:
    """Wait (bounded) for the window's requests, then record the rest's ages as lower bounds
    (into the recorder's running interval); returns how long it waited."""
    t0 = time.perf_counter()
    cutoff, ages = drain_pending(loop.recorder, loop.pending, spec.timeout_s)
    loop.unfinished = len(ages)
    loop.lower_bound_floor = min(ages, default=None)
    while loop.waiting:
        loop.bound_dropped(cutoff)
    loop.cut = True  # killing the unanswered ones yields: a late answer must not count twice
    return cutoff - t0
