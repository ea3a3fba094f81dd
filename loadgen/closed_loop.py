"""One closed-loop load step: N users against one URL, each sending its next request as soon as
the last one answered (no think time, like `ab -c N`).

Runs inside the generator process (`python -m loadgen`), which has monkey-patched with gevent.
Phases: start every user, settle (connections open, nothing recorded), measure for exactly the
window (every completed request's latency recorded from locust's request event), stop.

Each user is a greenlet with its own locust FastHttpSession (one connection), not a locust User:
a User's task scheduling and wait between tasks cost about 8% of the generator's CPU per request
against a fast target, for nothing a step uses (benchmarks/loadgen_overhead.py). The request,
its event and its error handling are locust's. On several generator processes (`loadgen.master`)
each worker runs a `ClosedLoop` with its share of the users (`run_closed_share`), timed from the
step's common start; the web UI runs locust's own users.
"""

from __future__ import annotations

import time
from typing import Any

import gevent
from gevent.pool import Group
from locust.event import EventHook

from loadgen.phases import after_drain, common_begin, drain_pending, run_phases, share_window
from loadgen.protocol import Done, Start
from loadgen.recording import Recorder
from loadgen.request import Picker
from loadgen.session import User, new_users
from loadgen.shares import ClosedShare, closed_figures


class ClosedLoop:
    """The users' requests, counted by when they were sent: one sent inside the window counts
    whenever it answers, so a server that stops answering near the cut-off cannot hide the
    requests it holds. After the window the users send no more; the window's requests are
    waited for (bounded), and each still unanswered is recorded with its age since it was sent,
    a lower bound of its latency, as in the open loop (`loadgen.open_loop`). Throughput stays
    the answers that arrived inside the window."""

    def __init__(self, start: Start) -> None:
        expected = start.expected_body.encode() if start.expected_body is not None else None
        self.start = start
        self.picker = Picker(start)  # the step's route, or a mix's drawn by weight
        self.recorder = Recorder(expected, self.picker.names, self.picker.expect)
        # the window's requests not answered yet: when each was sent, and its route
        self.pending: dict[int, tuple[float, str]] = {}
        self.ok_in_window = 0  # answers that arrived inside the window, whenever sent
        self.unfinished = 0
        self.floor: float | None = None  # the youngest unfinished request's age, ms
        self.stopping = False  # the window closed: users send nothing more
        self.cut = False  # the drain's cut-off passed: nothing more is recorded

    def on_request(self, context: dict[str, Any], **kw: Any) -> None:
        if self.cut:  # an answer after the cut-off: its age is already recorded, once
            return
        kind = self.recorder.on_request(measured=bool(context.get("measured")), **kw)
        self.ok_in_window += kind is None and self.recorder.measuring

    def user(self, user: User, picker: Picker, number: int) -> None:
        """One closed-loop user (`number`: its {user}) until the window closes (logged in
        already where the step has a login: `loadgen.session`). The yield between
        requests keeps a request that fails at once (a refused connection) from starving the
        event loop, as locust's wait does. The recorder checks each body against `expected`."""
        session = user.session
        token = id(gevent.getcurrent())
        while not self.stopping:
            measured = self.recorder.measuring
            req = picker.next(number)
            if measured:
                self.pending[token] = (time.perf_counter(), req.name or req.path)
            try:
                context = {"measured": measured}
                session.request(
                    req.method,
                    req.path,
                    name=req.name or req.path,
                    data=req.body,
                    headers=user.headers(req),
                    context=context,
                )
            finally:
                self.pending.pop(token, None)
            gevent.sleep(0)

    def drain(self) -> float:
        """Wait (bounded) for the window's requests, then record the rest's ages since their
        send as lower bounds; returns how long it waited."""
        self.stopping = True
        t0 = time.perf_counter()
        cutoff, ages = drain_pending(self.recorder, self.pending, self.start.timeout_s)
        self.unfinished, self.floor = len(ages), min(ages, default=None)
        self.cut = True
        return cutoff - t0

    def share(self, drain_s: float) -> ClosedShare:
        """This generator's cut-off figures, beside its intervals."""
        return ClosedShare(self.unfinished, self.ok_in_window, drain_s, self.floor)

    def spawn_users(self) -> Group:
        """The step's users, each on its own connection (with a login, each logged in first)."""
        events = EventHook()
        events.add_listener(self.on_request)
        users = Group()
        given = (self.start, events, self.recorder.logins, self.start.users)
        made = new_users(*given, self.picker.source)
        for i, user in enumerate(made):
            users.spawn(self.user, user, self.picker, self.start.user_base + i)
        return users


def run_closed(start: Start) -> Done:
    loop = ClosedLoop(start)
    users = loop.spawn_users()
    try:
        done = run_phases(start, loop.recorder)
        drain_s = loop.drain()
        loop.recorder.roll(done.duration_s, done.duration_s + drain_s, drain=True)
    finally:
        users.kill(block=True, timeout=5)
    latency = loop.recorder.latency()
    cut = closed_figures([loop.share(drain_s)], latency["latency_ms"], latency["all_latency_ms"])
    return after_drain(done, loop.recorder, loop.unfinished, latency, closed_loop=cut)


def run_closed_share(loop: ClosedLoop) -> float:
    """One generator's share of a closed-loop step run by several (`loadgen.shares.share_out`):
    its users from the common start, its window timed by that same start (the master's rolls
    collect the intervals), then its drain. Returns how long the drain took."""
    begin = common_begin(loop.start)
    users = loop.spawn_users()
    try:
        share_window(loop.start, loop.recorder, begin)
        return loop.drain()
    finally:
        users.kill(block=True, timeout=5)
