"""One step on several generator processes: a locust master here, locust workers doing the load.

Why: one generator process tops out near one core (gevent runs on one), so a fast server or a big
machine needs several; locust's own master/worker link connects them. The master starts
`generators` local workers (`python -m loadgen.worker_node`), each pinned to its own core, waits
for them and for `remote_generators` started elsewhere (`lab generator --connect`), hands each its
share of the step (`loadgen.shares`: users, or arrivals in `loadgen.open_fleet`), all timing one
window from one common start, and runs the same settle/measure phases as a single generator;
after the window it waits for every worker's drain (`ShareFleet.finish`). Every second each
worker sends its interval's HdrHistogram; the master forwards each one to the lab (a `Histogram`
per worker, named by `source`) and computes the step's figures from their exact merge.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any, TypeVar

import gevent
from locust.env import Environment
from locust.runners import STATE_MISSING, MasterRunner

from loadgen import fanout
from loadgen.phases import DRAIN_MAX_S, after_drain, run_phases
from loadgen.protocol import CONNECT_WAIT_S, Done, Part, Start, missing_generators
from loadgen.recording import (
    CpuMeter,
    Interval,
    Recorder,
    lag_figures,
    merged,
)
from loadgen.request import RouteTally
from loadgen.shares import closed_figures, share_out

LEAD_S = 0.5  # the shares begin this long after the master sends them: all have them by then


class MissingGenerators(RuntimeError):
    """Fewer workers connected than the step needs, or one left during it."""


class Fleet(Recorder):
    """The master's recorder: its intervals are the workers' reports, merged exactly."""

    def __init__(self, runner: MasterRunner) -> None:
        super().__init__(None)
        self.runner = runner
        self.names: dict[str, str] = {}  # locust node id -> source name
        self.seq = 0
        self.inbox: dict[str, list[fanout.Report]] = {}
        self.live: dict[str, tuple[int, int]] = {}
        self.cpus: dict[str, list[int]] = {}
        self.last_cpu: dict[str, float] = {}
        self.totals: dict[str, Counter[str]] = {}  # per source: requests, ok
        self.cpu_series: dict[str, list[float]] = {}
        self.ready: set[str] = set()  # workers whose handlers are registered (fanout.READY)
        runner.register_message(fanout.INTERVAL, self.on_report)
        runner.register_message(fanout.READY, self.on_ready)

    def wait_for(self, local: int, remote: int, timeout_s: float = CONNECT_WAIT_S) -> None:
        """Until `local` + `remote` workers are ready for work (connected is not enough: see
        `fanout.READY`); names them in the order of their ids."""
        count = local + remote
        deadline = time.monotonic() + timeout_s
        while len(self.ready) < count and time.monotonic() < deadline:
            gevent.sleep(0.05)
        if len(self.ready) < count:
            raise MissingGenerators(missing_generators(len(self.ready), local, remote, timeout_s))
        for i, node in enumerate(sorted(self.ready), 1):
            self.names[node] = f"generator-{i}@{node.rsplit('_', 1)[0]}"

    def on_ready(self, msg: Any, **_: Any) -> None:
        self.ready.add(msg.node_id)

    def on_report(self, msg: Any, **_: Any) -> None:
        report = fanout.Report.from_data(msg.data)
        self.inbox.setdefault(msg.node_id, []).append(report)
        self.live[msg.node_id] = (report.live_requests, report.live_errors)
        self.cpus[msg.node_id] = report.cpus

    def collect(self) -> dict[str, Interval]:
        """Ask every worker for its interval; each one's, merged with any late earlier answer."""
        self.seq += 1
        self.runner.send_message(fanout.ROLL, {"seq": self.seq})
        deadline = time.monotonic() + fanout.REPORT_TIMEOUT_S
        while not self._all_answered() and time.monotonic() < deadline:
            gevent.sleep(0.002)
        got, self.inbox = self.inbox, {}
        self.live_requests = sum(n for n, _ in self.live.values())
        self.live_errors = sum(e for _, e in self.live.values())
        for node, reports in got.items():
            self.last_cpu[node] = sum(r.cpu_pct for r in reports) / len(reports)
        return {self.names.get(n, n): _merged(r) for n, r in got.items()}

    def _all_answered(self) -> bool:
        gone = [name for node, name in self.names.items() if not self._present(node)]
        if gone:
            raise MissingGenerators(
                f"{', '.join(gone)} left during the step (a remote `lab generator` stopped, or "
                "a generator process died): its share of the load is missing"
            )
        return all(any(r.seq >= self.seq for r in self.inbox.get(n, ())) for n in self.names)

    def _present(self, node: str) -> bool:
        worker = self.runner.clients.get(node)
        return worker is not None and worker.state != STATE_MISSING

    def refresh(self) -> None:
        self.collect()  # settling: live counts only, the intervals are not measured

    def roll(self, start: float, end: float, drain: bool = False) -> dict[str, Any]:
        parts = self.collect()
        for node, name in self.names.items():
            part = parts.get(name, Interval())
            total = self.totals.setdefault(name, Counter())
            # its unfinished requests (their ages, lower bounds) are requests, not answers
            answers = part.hist.get_total_count() - part.bounds
            total.update(requests=part.requests + part.bounds, ok=answers)
            self.cpu_series.setdefault(name, []).append(self.last_cpu.get(node, 0.0))
        return self.account(start, end, parts, drain)

    def parts(self, window_s: float) -> list[Part]:
        out = []
        for node, name in self.names.items():
            total, cpu = self.totals.get(name, Counter()), self.cpu_series.get(name, [])
            mean = round(sum(cpu) / len(cpu), 1) if cpu else 0.0
            lag = lag_figures(self.lags[name]) if name in self.lags else {}
            periodic = self.periodic_pct(window_s, name)
            cpus = self.cpus.get(node, [])
            out.append(Part(name, total["requests"], total["ok"], mean, cpus, lag, periodic))
        return out


class ShareFleet(Fleet):
    """The master's recorder for a step shared out over its workers (`loadgen.shares`), each
    timing the same window from one common start and draining after it: keeps what a worker
    measured before the master's own window opened, and waits for every worker's drain."""

    def __init__(self, runner: MasterRunner) -> None:
        super().__init__(runner)
        self.early: dict[str, list[Interval]] = {}  # measured before the master's window opened
        self.drained: dict[str, fanout.Drained] = {}  # per node
        runner.register_message(fanout.DRAINED, self.on_drained)

    def on_drained(self, msg: Any, **_: Any) -> None:
        self.drained[msg.node_id] = fanout.Drained.from_data(msg.data)

    def send_shares(self, share: Callable[[int, float], list[Start]]) -> None:
        """Each worker its own share (`share(workers, begin_at)`), all beginning LEAD_S from
        now; returns at that common start."""
        begin_at = time.time() + LEAD_S
        nodes = list(self.names)
        for node, own in zip(nodes, share(len(nodes), begin_at), strict=True):
            self.runner.send_message(fanout.START, own.to_json(), client_id=node)  # type: ignore[arg-type]  # locust sends any JSON-able data
        gevent.sleep(max(0.0, begin_at - time.time()))

    def refresh(self) -> None:
        """Settling: a worker's window may open a little before the master's; keep what it
        measured for the first measured second (its requests, each counted by its send or due
        time), not the settle's loop lag and periodic work."""
        for name, part in self.collect().items():
            self.early.setdefault(name, []).append(replace(part, lag=None, periodic_s=0.0))

    def collect(self) -> dict[str, Interval]:
        parts = super().collect()
        if not self.measuring or not self.early:
            return parts
        early, self.early = self.early, {}
        names = set(parts) | set(early)
        return {n: merged([*early.get(n, []), parts.get(n, Interval())]) for n in names}

    def finish(self, window_s: float) -> float:
        """Wait for every worker's drain, then roll its last interval in as one more after the
        window; returns the longest drain."""
        deadline = time.monotonic() + DRAIN_MAX_S + fanout.REPORT_TIMEOUT_S + LEAD_S
        while len(self.drained) < len(self.names) and time.monotonic() < deadline:
            self._all_answered()  # raises when a worker left
            gevent.sleep(0.01)
        if silent := [name for node, name in self.names.items() if node not in self.drained]:
            raise MissingGenerators(f"{', '.join(silent)} sent no figures after the window")
        for node, drained in self.drained.items():
            self.inbox.setdefault(node, []).append(drained.report)
            if drained.login:  # its users' logins, beside the mix's requests
                self.logins.add(RouteTally.of(drained.login))
        drain_s = max(_drain_s(d) for d in self.drained.values())
        cpu = {name: list(series) for name, series in self.cpu_series.items()}
        self.roll(window_s, window_s + drain_s, drain=True)
        self.cpu_series = cpu  # each part's CPU stays the measured window's
        return drain_s


def _drain_s(drained: fanout.Drained) -> float:
    if drained.closed is not None:
        return drained.closed.drain_s
    return drained.share.figures.drain_s if drained.share is not None else 0.0


F = TypeVar("F", bound=Fleet)


class FleetCpu:
    """The generator's CPU: the master's own plus every worker's last report (100 = one core)."""

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet
        self.own = CpuMeter()

    def lap(self) -> float:
        return round(self.own.lap() + sum(self.fleet.last_cpu.values()), 1)


def _merged(reports: list[fanout.Report]) -> Interval:
    return merged([r.interval() for r in reports])


def address(master: str) -> tuple[str, int]:
    """HOST:PORT to bind; port 0 picks a free one."""
    host, _, port = master.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    if int(port):
        return host, int(port)
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.bind((host if host != "*" else "", 0))
        return host, int(s.getsockname()[1])


def start_local(start: Start, port: int) -> list[subprocess.Popen[bytes]]:
    """The local workers, each pinned to its own core (round robin over `generator_cpus`)."""
    workers = []
    for i in range(start.generators):
        argv = [sys.executable, "-m", "loadgen.worker_node", f"127.0.0.1:{port}"]
        if start.generator_cpus:
            argv += ["--cpu", str(start.generator_cpus[i % len(start.generator_cpus)])]
        # stdout is the lab's protocol pipe: a worker never writes to it
        workers.append(subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL))
    return workers


@contextlib.contextmanager
def fleet_for(start: Start, make: Callable[[MasterRunner], F]) -> Iterator[F]:
    """A master, its local workers started and pinned, every worker connected; all of them
    stopped afterwards, whatever happens."""
    host, port = address(start.master)
    env = Environment(host=start.base_url)  # no locust users: each worker runs its own share
    runner = env.create_master_runner(master_bind_host=host, master_bind_port=port)
    fleet = make(runner)
    workers = start_local(start, port)
    try:
        fleet.wait_for(start.generators, start.remote_generators)
        yield fleet
    finally:
        runner.quit()
        for worker in workers:
            _stop(worker)


def run_distributed(start: Start) -> Done:
    """A closed-loop step: the users shared out over the workers, each counting a request by
    its send inside the common window (`loadgen.closed_loop.run_closed_share`), whenever it
    answers; the requests still unanswered after the drains are lower bounds, as on one."""
    with fleet_for(start, ShareFleet) as fleet:
        fleet.send_shares(lambda n, begin_at: share_out(start, n, begin_at))
        done = run_phases(start, fleet, cpu=FleetCpu(fleet))
        fleet.finish(done.duration_s)
        latency = fleet.latency()
        shares = [s for d in fleet.drained.values() if (s := d.closed) is not None]
        cut = closed_figures(shares, latency["latency_ms"], latency["all_latency_ms"])
        parts = fleet.parts(done.duration_s)
        return after_drain(done, fleet, cut["unfinished"], latency, closed_loop=cut, parts=parts)


def _stop(worker: subprocess.Popen[bytes]) -> None:
    try:
        worker.wait(timeout=2.0)  # the master's quit ends them
    except subprocess.TimeoutExpired:
        worker.kill()
        worker.wait()
