"""One closed-loop load step, in its own process: locust users against one URL.

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

import logging  # noqa: E402
import sys  # noqa: E402
from typing import Any  # noqa: E402

from locust import FastHttpUser, constant, task  # noqa: E402
from locust.env import Environment  # noqa: E402

from loadgen.recording import Recorder, emit, run_phases  # noqa: E402
from loadgen.spec import StepSpec, spec_from_json  # noqa: E402


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
    try:
        return run_phases(spec, recorder)
    finally:
        runner.quit()


def main() -> None:
    logging.basicConfig(level=logging.ERROR, stream=sys.stderr)
    emit(run_closed(spec_from_json(sys.argv[1])))


if __name__ == "__main__":
    main()
