"""A step on oha whose generators are on other machines too: each `lab generator --connect`
runs its share with its own oha and hands its records over after the window.

Why this shape: the lab's own engine merges its workers' histograms every second as they arrive
(`loadgen.master`); oha hands its per-request records over only when it exits, so a remote share
is merged once, after the window, by its requests' own times (`loadgen.oha.wire`): the same rows
a local oha process leaves, read by the same code (`loadgen.oha.figures`). The driver
(`loadgen.oha.driver`) is this step's master: it binds locust's master where `Start.master` says,
waits for the remote generators (`fanout.READY`), sends each its share of the users or the rate
(`fanout.START`, engine oha) to begin at one common moment with the shares run here, and after
its own window waits for each one's records (`fanout.OHA_RECORDS`). The worker's side is
`loadgen.worker_node` (`python -m loadgen.oha --share FILE START` on the remote machine).

Each oha times its requests from its own start, and each starts at the common moment by its own
machine's clock: the windows line up as far as the machines' clocks agree (NTP: milliseconds),
as the lab's engine's shares do. A remote share's CPU is its oha processes' own, in its part.
"""

from __future__ import annotations

import time
from dataclasses import replace
from types import TracebackType
from typing import Any

import gevent
from locust.env import Environment
from locust.runners import STATE_MISSING

from loadgen import fanout
from loadgen.master import address
from loadgen.oha import wire
from loadgen.oha.figures import OhaRun
from loadgen.oha.summary import REMOTE
from loadgen.protocol import CONNECT_WAIT_S, Start, missing_generators

# The shares begin this long after the master sends them: a remote share's process (Python,
# numpy) must start and have its oha ready by then; a share that begins late still measures a
# whole window of its own, that much later.
LEAD_S = 2.0


class RemoteFailed(Exception):
    """A remote generator did not come, left, or sent no records: why, in one line."""


def share_start(start: Start, rate_rps: float, cap: int, begin_at: float) -> Start:
    """One remote generator's part of the step: its users (closed loop) or its rate and cap, one
    oha process of its own, beginning at `begin_at`."""
    if start.rate_rps is None:
        own = replace(start, users=cap)
    else:
        own = replace(start, rate_rps=rate_rps, max_outstanding=cap)
    return replace(own, generators=1, remote_generators=0, generator_cpus=(), begin_at=begin_at)


class Far:
    """The step's remote generators, from their connection to their records."""

    def __init__(self, start: Start) -> None:
        host, port = address(start.master)
        env = Environment(host=start.base_url)  # no locust users: each worker runs its own oha
        self.runner = env.create_master_runner(master_bind_host=host, master_bind_port=port)
        self.count = start.remote_generators
        self.ready: list[str] = []  # locust node ids, in the order they said READY
        self.got: dict[str, dict[str, Any]] = {}  # node -> {"blob", "failed"}
        self.runner.register_message(fanout.READY, lambda msg, **_: self.ready.append(msg.node_id))
        self.runner.register_message(fanout.OHA_RECORDS, self._on_records)

    def _on_records(self, msg: Any, **_: Any) -> None:
        self.got[msg.node_id] = msg.data

    def __enter__(self) -> Far:
        deadline = time.monotonic() + CONNECT_WAIT_S
        while len(self.ready) < self.count and time.monotonic() < deadline:
            gevent.sleep(0.05)
        if len(self.ready) < self.count:
            self.runner.quit()
            raise RemoteFailed(missing_generators(len(self.ready), 0, self.count, CONNECT_WAIT_S))
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.runner.quit()  # each `lab generator` counts its step and waits for the next

    def _present(self, node: str) -> bool:
        worker = self.runner.clients.get(node)
        return worker is not None and worker.state != STATE_MISSING

    def name(self, node: str) -> str:
        return f"{REMOTE}{self.ready.index(node) + 1}@{node.rsplit('_', 1)[0]}"

    def send(self, start: Start, shares: list[tuple[float, int]]) -> None:
        """Each remote generator its (rate, cap) share, all beginning LEAD_S from now; returns
        at that moment, when the shares run here begin too."""
        begin_at = time.time() + LEAD_S
        for node, (rate, cap) in zip(self.ready, shares, strict=True):
            own = share_start(start, rate, cap, begin_at)
            self.runner.send_message(fanout.START, own.to_json(), client_id=node)  # type: ignore[arg-type]  # locust sends any JSON-able data
        gevent.sleep(max(0.0, begin_at - time.time()))

    def runs(self, bound_s: float) -> list[OhaRun]:
        """Every remote share's records, once each has sent them (at most `bound_s` after the
        shares here ended: its oha began with them, waits for its last requests, then exits)."""
        deadline = time.monotonic() + bound_s
        while len(self.got) < self.count and time.monotonic() < deadline:
            if gone := [self.name(n) for n in self.ready if not self._present(n)]:
                raise RemoteFailed(f"{', '.join(gone)} left during the step: its share is missing")
            gevent.sleep(0.05)
        out: list[OhaRun] = []
        for node in self.ready:
            sent = self.got.get(node)
            if sent is None:
                late = f"{bound_s:.0f} s after the window"
                raise RemoteFailed(f"{self.name(node)} sent no records {late}")
            if sent.get("failed"):
                raise RemoteFailed(f"{self.name(node)}: {sent['failed']}")
            out += wire.decode(sent["blob"], self.name(node))
        return out
