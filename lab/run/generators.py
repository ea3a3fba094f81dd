"""How many load-generator processes a run uses, where they run, and what a saturated one needs.

Why several: one generator process (gevent on one core) tops out near one core's worth of
requests; past that the lab measures itself, not the server. `--generators N` runs N locust
workers under one locust master (`loadgen.master`), each pinned to its own core of the client
half of the machine; `--remote-generators M` waits for M more started on other machines with
`lab generator --connect HOST:PORT`. The default is automatic: the client half's cores minus the
one the upstream and the master share (1 on a 2-core machine). Open loop shares one arrival
process out over them (`loadgen.shares`), and its automatic count follows each step's rate: one
process per OPEN_RPS_PER_GENERATOR req/s, at most those cores.
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass, replace
from typing import Any

from lab.record.errors import LabError
from lab.record.step import StepRecord
from lab.record.thresholds import T
from lab.system import safety
from lab.system.listeners import LOOPBACK, REMOTE_MASTER
from lab.verdict.facts import generators_needed
from loadgen.protocol import SERVED_NOTHING, SERVED_STEP, SERVED_WARMUP, Done, Start

SATURATED_PCT = T.generator_cpu_saturated_pct  # of one core, per process (client_saturated)
# Arrivals one open-loop generator process offers on time with room to spare. Measured by
# benchmarks/open_loop_scale.py (docs/benchmarks.md) on the 2-core machine: one process sent up
# to 6,000 req/s on time, its core then full (0.12-0.25 ms of CPU per arrival, 49% of a core at
# 2,000); on a 16-core machine one process fell behind near 3,000. At this rate it stays near
# half a core, leaving room for a slower core, a heavier request or a busier second.
OPEN_RPS_PER_GENERATOR = 2000.0
DEFAULT_MASTER = f"{LOOPBACK}:0"  # a free loopback port; remote workers need a fixed one


@dataclass(frozen=True)
class Generators:
    """A run's generator processes: `local` ones the master starts, `remote` ones it waits for."""

    local: int = 1  # automatic: the most an open-loop step may use
    remote: int = 0
    master: str = DEFAULT_MASTER  # HOST:PORT the master binds for its workers
    auto: bool = False  # no --generators: open loop takes as many as each rate needs

    @property
    def total(self) -> int:
        return self.local + self.remote

    def describe(self) -> dict[str, Any]:
        auto = {"auto_from_cores": auto_count(client_cores())}
        return {**asdict(self), **auto, "open_rps_per_generator": OPEN_RPS_PER_GENERATOR}

    def for_step(
        self, rate_rps: float | None, cap: int, per_process: float = OPEN_RPS_PER_GENERATOR
    ) -> int:
        """Local processes for one step: all of them in closed loop or when counted by the user;
        open loop, automatic: one per `per_process` req/s (the remote ones' included; oha's
        processes hold more than the lab's, `lab.run.engine`), at most `local`, and never more
        than the cap on requests in flight can be shared by."""
        if rate_rps is None or not self.auto:
            return self.local
        wanted = math.ceil(rate_rps / per_process) - self.remote
        return max(0 if self.remote else 1, min(self.local, wanted, cap - self.remote))

    def more(self, than: int) -> int | None:
        """A larger local count than `than` for a step whose generators were saturated: twice
        as many, at most the client cores' (or `local`, if more were asked for); None when
        there are no more."""
        most = max(self.local, auto_count(client_cores()))
        return min(most, 2 * max(than, 1)) if than < most else None


def open_loop_start(start: Start, client: tuple[int, ...]) -> Start:
    """An open-loop step outside a run's plan (experiments, benchmarks) on as many generator
    processes as its rate needs, at most `client`'s cores' worth, pinned as a run pins them."""
    fleet = Generators(local=auto_count(client), auto=True)
    count = fleet.for_step(start.rate_rps, start.max_outstanding)
    return replace(start, generators=count, generator_cpus=worker_cores(client))


def client_cores() -> tuple[int, ...]:
    """The client half of this machine's usable cores (as the native backend pins them)."""
    cpus = sorted(os.sched_getaffinity(0))
    return tuple(cpus[: len(cpus) // 2]) if len(cpus) >= 2 else tuple(cpus)


def auto_count(client: tuple[int, ...]) -> int:
    """One generator per client core, leaving one core to the upstream and the master."""
    return max(1, len(client) - 1)


def worker_cores(client: tuple[int, ...]) -> tuple[int, ...]:
    """Cores for the local workers (one each, round robin): the client cores but the first,
    which the upstream and the master keep, when there are two or more."""
    return client[1:] if len(client) >= 2 else client


def choose(
    requested: int | None,
    remote: int,
    master: str | None,
    allow_remote: bool,
    max_outstanding: int | None = None,
) -> Generators:
    """The run's generators from `--generators`, `--remote-generators` and `--master`;
    `max_outstanding`: open loop's cap on requests in flight, which they share."""
    if remote < 0 or (requested is not None and requested < 0):
        raise LabError("--generators and --remote-generators must be >= 0")
    local = auto_count(client_cores()) if requested is None else requested
    if local + remote < 1:
        raise LabError("--generators 0 needs --remote-generators 1 or more")
    least = max(1, remote + (0 if requested is None else local))
    if max_outstanding is not None and max_outstanding < least:
        raise LabError(
            f"--max-outstanding {max_outstanding}: {least} generator processes share it, each "
            "needs at least one request in flight; raise it or use fewer generators"
        )
    address = master or (REMOTE_MASTER if remote else DEFAULT_MASTER)
    check_master(address, allow_remote)
    return Generators(local, remote, address, auto=requested is None)


def check_master(address: str, allow_remote: bool) -> None:
    """HOST:PORT with a port number; a non-loopback host only with --allow-remote."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise LabError(f"--master {address!r}: expected HOST:PORT, e.g. 127.0.0.1:5557")
    safety.check_host(host.strip("[]"), "--master", allow_remote=allow_remote)


def served(codes: set[int]) -> str:
    """What one round of `lab generator`'s workers served, from their exit statuses: "step" (a
    measured one), "warmup", "nothing" (the master quit before sending one) or "failed"."""
    if codes - {SERVED_STEP, SERVED_WARMUP, SERVED_NOTHING}:
        return "failed"
    if codes == {SERVED_STEP}:
        return "step"
    return "warmup" if SERVED_WARMUP in codes else "nothing"


def saturated(step: StepRecord) -> bool:
    """Whether more generators may measure more: the verdict named the apparatus as the
    step's limit, or the generator's own loop set its tail (`generator_lag`)."""
    return step.evidence.limit_rule == "apparatus" or "generator_lag" in step.evidence.flags


def saturation(done: Done, cores: tuple[int, ...]) -> dict[str, Any] | None:
    """Evidence that the generators were the limit, or None: one process at >= 90% of its core,
    or all of them together at >= 90% of every core they shared."""
    per = [p.cpu_pct for p in done.parts] or [done.client_cpu_pct]
    shared = len(set(cores)) or len(per)
    busiest = max(per)
    if busiest < SATURATED_PCT and done.client_cpu_pct < SATURATED_PCT * shared:
        return None
    return {
        "client_cpu_pct": done.client_cpu_pct,
        "per_generator_cpu_pct": per,
        "generators": len(per),
        "generators_needed": generators_needed(done.client_cpu_pct),
    }
