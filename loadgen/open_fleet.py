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

from dataclasses import asdict, replace
from typing import Any

from locust.runners import MasterRunner

from lab.record import hist
from loadgen.master import FleetCpu, ShareFleet, fleet_for
from loadgen.phases import after_drain, run_phases
from loadgen.protocol import Done, Part, Start
from loadgen.shares import ShareResult, merge, split


class OpenFleet(ShareFleet):
    """The master's recorder for an open-loop step: per-second drops and requests in flight too."""

    def __init__(self, runner: MasterRunner) -> None:
        super().__init__(runner)
        self.dropped = 0  # since the last tick, every worker
        self.inflight: dict[str, int] = {}  # per node, at its last report

    def on_report(self, msg: Any, **_: Any) -> None:
        super().on_report(msg)
        report = self.inbox[msg.node_id][-1]
        self.dropped += report.dropped
        self.inflight[msg.node_id] = report.inflight

    def tick(self) -> dict[str, int]:
        """This second's drops and the requests in flight, every worker together."""
        dropped, self.dropped = self.dropped, 0
        return {"dropped": dropped, "inflight": sum(self.inflight.values())}

    def shares(self) -> list[ShareResult]:
        """Every worker's open-loop figures, in the order of `names`."""
        return [s for n in self.names if (s := self.drained[n].share) is not None]

    def parts(self, window_s: float) -> list[Part]:
        figures = [asdict(share.figures) for share in self.shares()]
        own = super().parts(window_s)
        return [replace(p, open_loop=f) for p, f in zip(own, figures, strict=True)]


def run_open_distributed(start: Start) -> Done:
    """The step's arrivals shared out over every worker, measured and merged as one."""
    assert start.rate_rps is not None
    with fleet_for(start, OpenFleet) as fleet:
        fleet.send_shares(lambda n, begin_at: split(start, n, begin_at))
        done = run_phases(start, fleet, fleet.tick, cpu=FleetCpu(fleet))
        fleet.finish(done.duration_s)
        latency = fleet.latency()  # from each request's intended start, unfinished ages included
        figures = merge(
            start.rate_rps, fleet.shares(), latency["latency_ms"], latency["all_latency_ms"]
        )
        figures = replace(figures, send_lateness_ms=hist.summary_ms(fleet.late_sends))
        parts = fleet.parts(done.duration_s)
        return after_drain(done, fleet, figures.unfinished, latency, open_loop=figures, parts=parts)
