"""One open-loop step on several generator processes: the master's side.

Why: one generator process offers about one core's worth of arrivals (`loadgen.open_loop` on one
gevent loop); a faster server needs the arrivals of several. The master splits the step's arrival
process into one schedule per worker (`loadgen.shares.split`), all starting at one wall-clock
instant, and sends each worker its own. Every worker times its measured window from that instant
and counts a request when it was due inside the window, whenever it answers, exactly as one
generator does; the master rolls their intervals once a second (what a worker measured before the
master's own window opened is kept for the first measured second, never dropped), and after the
window waits for each worker's drain and its last word (`fanout.Drained`): the drain's interval
and its own counts, which add up exactly (`loadgen.shares.merge`).
"""

from __future__ import annotations

import time
from dataclasses import asdict, replace
from typing import Any

import gevent
from locust.runners import MasterRunner

from lab.record import hist
from loadgen import fanout
from loadgen.master import Fleet, FleetCpu, MissingGenerators, fleet_for, merged
from loadgen.open_loop import DRAIN_MAX_S
from loadgen.protocol import Done, Part, Start
from loadgen.recording import Interval, run_phases
from loadgen.shares import merge, split

LEAD_S = 0.5  # the schedules begin this long after the master sends them: all have them by then


class OpenFleet(Fleet):
    """The master's recorder for an open-loop step: rolls, per-second drops, the workers' drains."""

    def __init__(self, runner: MasterRunner) -> None:
        super().__init__(runner)
        self.early: dict[str, list[Interval]] = {}  # measured before the master's window opened
        self.drained: dict[str, fanout.Drained] = {}  # per node
        self.dropped = 0  # since the last tick, every worker
        self.inflight: dict[str, int] = {}  # per node, at its last report
        runner.register_message(fanout.DRAINED, self.on_drained)

    def on_report(self, msg: Any, **_: Any) -> None:
        super().on_report(msg)
        report = self.inbox[msg.node_id][-1]
        self.dropped += report.dropped
        self.inflight[msg.node_id] = report.inflight

    def on_drained(self, msg: Any, **_: Any) -> None:
        self.drained[msg.node_id] = fanout.Drained.from_data(msg.data)

    def tick(self) -> dict[str, int]:
        """This second's drops and the requests in flight, every worker together."""
        dropped, self.dropped = self.dropped, 0
        return {"dropped": dropped, "inflight": sum(self.inflight.values())}

    def refresh(self) -> None:
        """Settling: a worker's window may open a little before the master's; keep what it
        measured for the first measured second (its requests, each counted by its due time),
        not the settle's loop lag and periodic work."""
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
        drain_s = max(d.share.figures.drain_s for d in self.drained.values())
        cpu = {name: list(series) for name, series in self.cpu_series.items()}
        self.roll(window_s, window_s + drain_s, drain=True)
        self.cpu_series = cpu  # each part's CPU stays the measured window's
        return drain_s

    def parts(self, window_s: float) -> list[Part]:
        figures = [asdict(self.drained[node].share.figures) for node in self.names]
        own = super().parts(window_s)
        return [replace(p, open_loop=f) for p, f in zip(own, figures, strict=True)]


def run_open_distributed(start: Start) -> Done:
    """The step's arrivals shared out over every worker, measured and merged as one."""
    assert start.rate_rps is not None
    with fleet_for(start, OpenFleet) as fleet:
        begin_at = time.time() + LEAD_S
        nodes = list(fleet.names)
        for node, share in zip(nodes, split(start, len(nodes), begin_at), strict=True):
            fleet.runner.send_message(fanout.START, share.to_json(), client_id=node)  # type: ignore[arg-type]  # locust sends any JSON-able data
        gevent.sleep(max(0.0, begin_at - time.time()))
        done = run_phases(start, fleet, fleet.tick, cpu=FleetCpu(fleet))
        fleet.finish(done.duration_s)
        latency = fleet.latency()  # from each request's intended start, unfinished ages included
        shares = [fleet.drained[n].share for n in nodes]
        figures = merge(start.rate_rps, shares, latency["latency_ms"], latency["all_latency_ms"])
        figures = replace(figures, send_lateness_ms=hist.summary_ms(fleet.late_sends))
        return replace(
            done,
            requests=fleet.requests + figures.unfinished,
            ok=fleet.ok,
            errors=dict(fleet.errors),
            routes=fleet.route_figures(),  # the drain's answers too
            **latency,
            open_loop=figures,
            parts=fleet.parts(done.duration_s),
        )
