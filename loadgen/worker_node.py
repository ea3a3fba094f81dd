"""One generator worker: `python -m loadgen.worker_node HOST:PORT [--cpu N]`.

A locust worker that connects to a generator master (`loadgen.master`), takes the step from it,
runs the users the master gives it and answers every roll with what it measured since its last
answer. The master starts these on its own machine; `lab generator --connect` starts them on
others. It exits when the master quits (end of the step) or is gone for locust's heartbeat limit.
"""

from gevent import monkey

monkey.patch_all()  # before anything imports socket; locust would do this on import anyway

import argparse  # noqa: E402
import logging  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

from locust.env import Environment  # noqa: E402

from loadgen import fanout  # noqa: E402
from loadgen.lean import drop_locust_stats, quiet_gc  # noqa: E402
from loadgen.protocol import Start  # noqa: E402
from loadgen.recording import CpuMeter, Recorder  # noqa: E402
from loadgen.request import Request  # noqa: E402
from loadgen.users import model_user  # noqa: E402


class Node:
    """The worker's user class, recorder and CPU meter, configured by the master's START."""

    def __init__(self, master_host: str, master_port: int) -> None:
        self.user = model_user("lab", "", lambda: Request("/"))
        self.recorder = Recorder(None)
        self.recorder.measuring = True  # every completion counts; the master keeps measured ones
        self.cpu = CpuMeter()
        self.cpus = sorted(os.sched_getaffinity(0))
        env = Environment(user_classes=[self.user])
        env.events.request.add_listener(self.recorder.on_request)
        self.runner = env.create_worker_runner(master_host, master_port)
        drop_locust_stats(env)
        self.runner.register_message(fanout.START, self.on_start)
        self.runner.register_message(fanout.ROLL, self.on_roll)

    def on_start(self, msg: Any, **_: Any) -> None:
        start = Start.from_json(msg.data)
        self.recorder.expected = (
            start.expected_body.encode() if start.expected_body is not None else None
        )
        self.user.host = start.base_url
        request = Request.of(start)
        self.user.plan = staticmethod(lambda: request)
        self.user.network_timeout = start.timeout_s
        self.user.connection_timeout = start.timeout_s
        quiet_gc()

    def on_roll(self, msg: Any, **_: Any) -> None:
        """Hand the master this interval; the time it takes is the worker's periodic work."""
        work_start = time.perf_counter()
        live = (self.recorder.live_requests, self.recorder.live_errors)
        interval = self.recorder.take()
        report = fanout.Report.of(int(msg.data["seq"]), interval, live, self.cpu.lap(), self.cpus)
        self.runner.send_message(fanout.INTERVAL, report.to_data())
        self.recorder.periodic_s += time.perf_counter() - work_start


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m loadgen.worker_node")
    parser.add_argument("master", metavar="HOST:PORT", help="the generator master to serve")
    parser.add_argument("--cpu", type=int, help="pin this worker to one core")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    args = parse(argv)
    host, _, port = args.master.rpartition(":")
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    try:
        node = Node(host.strip("[]"), int(port))
    except ConnectionError:
        print(f"no generator master answered at {args.master}", file=sys.stderr)
        return 1
    node.runner.greenlet.join()  # until the master says quit
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
