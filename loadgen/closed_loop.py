"""One closed-loop load step: locust users against one URL, each sending its next request as soon
as the last one answered (no think time, like `ab -c N`).

Runs inside the generator process (`python -m loadgen`), which has monkey-patched with gevent.
Phases: spawn all users, settle (connections open, nothing recorded), measure for exactly the
window (every completed request's latency recorded from locust's request event), stop.
"""

from __future__ import annotations

from locust.env import Environment

from loadgen.lean import drop_locust_stats
from loadgen.protocol import Done, Start
from loadgen.recording import Recorder, run_phases
from loadgen.request import Request
from loadgen.users import model_user


def run_closed(start: Start) -> Done:
    expected = start.expected_body.encode() if start.expected_body is not None else None
    recorder = Recorder(expected)
    request = Request.of(start)
    user = model_user(
        "lab",
        start.base_url,
        lambda: request,  # the recorder checks each body against `expected`
        timeout_s=start.timeout_s,
        connect_timeout_s=start.timeout_s,
    )
    env = Environment(user_classes=[user])
    env.events.request.add_listener(recorder.on_request)
    runner = env.create_local_runner()
    drop_locust_stats(env)
    runner.start(start.users, spawn_rate=start.users)
    try:
        return run_phases(start, recorder)
    finally:
        runner.quit()
