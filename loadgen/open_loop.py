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
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import gevent
from gevent.pool import Group
from locust.contrib.fasthttp import FastHttpSession
from locust.env import Environment

from loadgen import hist
from loadgen.protocol import ARRIVALS, Done, OpenLoopFigures, Start
from loadgen.recording import Recorder, run_phases


def intended_offsets(rate: float, arrival: str, rng: random.Random) -> Iterator[float]:
    """Seconds after the start at which each request is meant to begin."""
    if arrival not in ARRIVALS:
        raise ValueError(f"arrival must be one of {ARRIVALS}, got {arrival!r}")
    t, i = 0.0, 0
    while True:
        if arrival == "poisson":
            t += rng.expovariate(rate)
            yield t
        else:
            yield i / rate
            i += 1


class OpenLoop:
    """The scheduler and its counters; latency goes to a Recorder as in the closed loop."""

    def __init__(self, spec: Start) -> None:
        self.spec = spec
        expected = spec.expected_body.encode() if spec.expected_body is not None else None
        self.recorder = Recorder(expected)
        self.service = hist.new_histogram()  # send-to-answer time, what closed loop would show
        env = Environment()
        env.events.request.add_listener(self.on_request)
        self.session = FastHttpSession(
            spec.base_url,
            env.events.request,
            user=None,
            concurrency=spec.max_outstanding,
            network_timeout=spec.timeout_s,
            connection_timeout=spec.timeout_s,
        )
        self.inflight = Group()
        self.started = 0  # requests sent while measuring
        self.first_sent = self.last_sent = 0.0  # perf_counter of the first and last of those
        self.dropped = 0  # requests due while measuring that the cap did not let start
        self.tick_dropped = 0

    def on_request(self, response_time: float, context: dict[str, Any], **kw: Any) -> None:
        from_intended_ms = (time.perf_counter() - context["intended"]) * 1000
        if self.recorder.measuring and kw.get("exception") is None:
            hist.record_ms(self.service, response_time)
        self.recorder.on_request(response_time=from_intended_ms, **kw)

    def send(self, intended: float) -> None:
        self.session.get(self.spec.path, name=self.spec.path, context={"intended": intended})

    def schedule(self, start: float) -> None:
        """Issue requests at their intended times until killed; catch up at once when late."""
        rng = random.Random(self.spec.seed)
        assert self.spec.rate_rps is not None
        for offset in intended_offsets(self.spec.rate_rps, self.spec.arrival, rng):
            due = start + offset
            delay = due - time.perf_counter()
            if delay > 0:
                gevent.sleep(delay)
            if len(self.inflight) >= self.spec.max_outstanding:
                if self.recorder.measuring:
                    self.dropped += 1
                    self.tick_dropped += 1
                continue
            if self.recorder.measuring:
                now = time.perf_counter()
                self.first_sent = self.first_sent or now
                self.last_sent = now
                self.started += 1
            self.inflight.spawn(self.send, due)

    def tick(self) -> dict[str, int]:
        """This second's open-loop figures for the tick line."""
        dropped, self.tick_dropped = self.tick_dropped, 0
        return {"dropped": dropped, "inflight": len(self.inflight)}

    def achieved_rate(self) -> float:
        """Sends per second between the first and the last send of the window: the rate the
        server was offered, unaffected by how late the window's own timer woke up."""
        span = self.last_sent - self.first_sent
        return (self.started - 1) / span if self.started > 1 and span > 0 else 0.0


def run_open(spec: Start) -> Done:
    if spec.rate_rps is None or spec.rate_rps <= 0:
        raise ValueError("open loop needs rate_rps > 0")
    loop = OpenLoop(spec)
    scheduler = gevent.spawn(loop.schedule, time.perf_counter())
    try:
        done = run_phases(spec, loop.recorder, loop.tick)
    finally:
        scheduler.kill()
        unfinished = len(loop.inflight)
        loop.inflight.kill(block=True, timeout=5)
    figures = OpenLoopFigures(
        rate_rps=spec.rate_rps,
        achieved_rate_rps=round(loop.achieved_rate(), 2),
        sent=loop.started,
        dropped=loop.dropped,
        unfinished=unfinished,
        service_latency_ms=hist.summary_ms(loop.service),
    )
    return replace(done, open_loop=figures)  # latency_ms is from each request's intended start
