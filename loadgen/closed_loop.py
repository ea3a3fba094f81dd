"""One closed-loop load step: N users against one URL, each sending its next request as soon as
the last one answered (no think time, like `ab -c N`).

Runs inside the generator process (`python -m loadgen`), which has monkey-patched with gevent.
Phases: start every user, settle (connections open, nothing recorded), measure for exactly the
window (every completed request's latency recorded from locust's request event), stop.

Each user is a greenlet with its own locust FastHttpSession (one connection), not a locust User:
a User's task scheduling and wait between tasks cost about 8% of the generator's CPU per request
against a fast target, for nothing a step uses (benchmarks/loadgen_overhead.py). The request,
its event and its error handling are locust's. Several generator processes (`loadgen.master`)
and the web UI run locust's own users.
"""

from __future__ import annotations

import gevent
from gevent.pool import Group
from locust.contrib.fasthttp import FastHttpSession
from locust.event import EventHook

from loadgen.protocol import Done, Start
from loadgen.recording import Recorder, run_phases
from loadgen.request import Picker
from loadgen.session import lab_session


def run_closed(start: Start) -> Done:
    expected = start.expected_body.encode() if start.expected_body is not None else None
    picker = Picker(start)  # the step's route, or a mix's drawn by weight
    recorder = Recorder(expected, picker.names)
    events = EventHook()
    events.add_listener(recorder.on_request)
    users = Group()
    for _ in range(start.users):
        users.spawn(user, lab_session(start, events, 1), picker)
    try:
        return run_phases(start, recorder)
    finally:
        users.kill(block=True, timeout=5)


def user(session: FastHttpSession, picker: Picker) -> None:
    """One closed-loop user until killed. The yield between requests keeps a request that fails
    at once (a refused connection) from starving the event loop, as locust's wait does. The
    recorder checks each body against `expected`."""
    while True:
        req = picker.next()
        name = req.name or req.path
        session.request(req.method, req.path, name=name, data=req.body, headers=req.header_dict)
        gevent.sleep(0)
