"""One generator worker: `python -m loadgen.worker_node HOST:PORT [--cpu N]`.

A locust worker that connects to a generator master (`loadgen.master`), takes its share of the
step from it (`loadgen.shares`), runs it and answers every roll with what it measured since its
last answer; after the window it drains and sends its last word (`fanout.Drained`). The
master starts these on its own machine; `lab generator --connect` starts them on others. It
exits when the master quits (end of the step) or is gone for locust's heartbeat limit, and its
exit status says what it served (`lab generator --steps` counts measured steps only).

The START it is sent is its own share: of the arrivals (open loop, run with
`loadgen.open_loop.run_share`) or of the users (closed loop, `run_closed_share`), both timed
from the step's common start and counted by send or due time.
"""

from gevent import monkey

monkey.patch_all()  # before anything imports socket; locust would do this on import anyway

import argparse  # noqa: E402
import logging  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from dataclasses import replace  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import gevent  # noqa: E402
from locust.env import Environment  # noqa: E402

from lab.record import hist  # noqa: E402
from loadgen import fanout  # noqa: E402
from loadgen.closed_loop import ClosedLoop, run_closed_share  # noqa: E402
from loadgen.open_loop import OpenLoop, run_share  # noqa: E402
from loadgen.phases import DRAIN_MAX_S, drop_locust_stats, quiet_gc  # noqa: E402
from loadgen.protocol import SERVED_NOTHING, SERVED_STEP, SERVED_WARMUP, Start  # noqa: E402
from loadgen.recording import CpuMeter, Interval, Recorder  # noqa: E402
from loadgen.shares import ShareResult  # noqa: E402

# A worker leaves this long after its step's end (drain included) when the master's quit never
# came: on a busy host that message can be lost, and locust's heartbeat limit (60 s) would keep a
# remote `lab generator` from serving the next step, whose master waits 30 s for its workers.
LEAVE_GRACE_S = 15.0


def step_end(start: Start, now: float) -> float:
    """When the step's work is over at the latest (wall clock): its schedule's start, the settle,
    the window and the longest drain (on oha: its wait for its last requests and its exit)."""
    if start.engine == "oha":
        return max(now, start.begin_at) + oha_bound_s(start)
    drain = min(start.timeout_s, DRAIN_MAX_S)
    return max(now, start.begin_at) + start.settle_s + start.duration_s + drain


def oha_bound_s(start: Start) -> float:
    """How long a share on oha may take once begun: the settle, the window, its requests'
    timeout and its start, its store and its exit (`loadgen.oha.driver.bound_s`, with room to
    spare for a remote machine's own Python)."""
    return start.settle_s + start.duration_s + start.timeout_s + 20.0


class Node:
    """The worker's recorder and CPU meter; its share of the step, configured by the master's
    START, runs on its own loop (`OpenLoop` or `ClosedLoop`), not as locust users."""

    def __init__(self, master_host: str, master_port: int) -> None:
        self.recorder = Recorder(None)  # until START: its rolls carry the loop's lag only
        self.cpu = CpuMeter()
        self.cpus = sorted(os.sched_getaffinity(0))
        env = Environment()
        self.runner = env.create_worker_runner(master_host, master_port)
        drop_locust_stats(env)
        self.runner.register_message(fanout.START, self.on_start)
        self.runner.register_message(fanout.ROLL, self.on_roll)
        self.served: Start | None = None
        self.open: OpenLoop | None = None
        # Last, when the node is whole (a START may be handled as soon as this is sent): locust's
        # client_ready comes before the handlers exist (the runner connects in its constructor),
        # so a START sent on it alone can arrive first and be dropped as unknown
        self.runner.send_message(fanout.READY)

    def on_start(self, msg: Any, **_: Any) -> None:
        start = self.served = Start.from_json(msg.data)
        quiet_gc()
        gevent.spawn_later(step_end(start, time.time()) + LEAVE_GRACE_S - time.time(), self.leave)
        if start.engine == "oha":  # its own oha; no rolls, its records once it exits
            gevent.spawn(self.run_oha, start)
            return
        self.recorder.loop_lag.greenlet.kill()  # the share's recorder probes the loop now
        if start.mode == "open":
            self.open = OpenLoop(start)
            self.recorder = self.open.recorder
            gevent.spawn(self.run_open, self.open)
            return
        closed = ClosedLoop(start)
        self.recorder = closed.recorder
        gevent.spawn(self.run_closed, closed)

    def on_roll(self, msg: Any, **_: Any) -> None:
        """Hand the master this interval; the time it takes is the worker's periodic work."""
        work_start = time.perf_counter()
        live = (self.recorder.live_requests, self.recorder.live_errors)
        interval = self.recorder.take()
        report = self.report(int(msg.data["seq"]), interval, live)
        self.runner.send_message(fanout.INTERVAL, report.to_data())
        self.recorder.periodic_s += time.perf_counter() - work_start

    def report(self, seq: int, interval: Interval, live: tuple[int, int]) -> fanout.Report:
        report = fanout.Report.of(seq, interval, live, self.cpu.lap(), self.cpus)
        if self.open is None:
            return report
        tick = self.open.tick()
        return replace(report, dropped=tick["dropped"], inflight=tick["inflight"])

    def last_report(self) -> fanout.Report:
        """The drain's interval, not an answer to a roll (seq -1)."""
        live = (self.recorder.live_requests, self.recorder.live_errors)
        return self.report(-1, self.recorder.take(), live)

    def run_open(self, loop: OpenLoop) -> None:
        """This worker's share of the arrivals, then its last word to the master."""
        drain_s = run_share(loop)
        figures = loop.figures({}, drain_s, {})  # the master marks bounds on the merged latency
        service = hist.encode(loop.service)
        share = ShareResult(figures, service, loop.lower_bound_floor, loop.all_floor())
        drained = fanout.Drained(self.last_report(), share, login=loop.recorder.login_figures())
        self.runner.send_message(fanout.DRAINED, drained.to_data())

    def run_closed(self, loop: ClosedLoop) -> None:
        """This worker's share of the users, then its last word to the master."""
        drain_s = run_closed_share(loop)
        login = loop.recorder.login_figures()
        drained = fanout.Drained(self.last_report(), closed=loop.share(drain_s), login=login)
        self.runner.send_message(fanout.DRAINED, drained.to_data())

    def run_oha(self, start: Start) -> None:
        """This worker's share on its own oha (`python -m loadgen.oha --share`), then its records
        to the master, or why there are none."""
        bound = max(0.0, start.begin_at - time.time()) + oha_bound_s(start)
        with tempfile.TemporaryDirectory(prefix="lab-oha-share-") as workdir:
            out = Path(workdir) / "records.npz"
            argv = [sys.executable, "-m", "loadgen.oha", "--share", str(out), start.to_json()]
            try:
                ran = subprocess.run(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                    timeout=bound,
                    check=False,
                )
                err = ran.stderr.decode(errors="replace").strip().splitlines()
                why = err[-1] if err else f"its oha's share exited {ran.returncode}"
                failed = "" if ran.returncode == 0 else why
            except subprocess.TimeoutExpired:
                failed = f"its oha still ran {bound:.0f} s after the step began: stopped"
            blob = out.read_bytes() if not failed and out.exists() else b""
        sent = {"blob": blob, "failed": failed or ("" if blob else "its oha wrote no records")}
        self.runner.send_message(fanout.OHA_RECORDS, sent)

    def leave(self) -> None:
        """The step is long over and no quit came: leave as if it had."""
        self.runner.greenlet.kill(block=False)

    def exit_status(self) -> int:
        """What this worker served, for `lab generator`'s count of steps."""
        if self.served is None:
            return SERVED_NOTHING
        return SERVED_WARMUP if self.served.warmup else SERVED_STEP


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
    return node.exit_status()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
