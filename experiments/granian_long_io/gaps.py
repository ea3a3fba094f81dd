"""What limits each row of `granian-long-io`, and why a measured figure differs from the page's.

Everything here reads figures a client and `ps` can see from outside, so it holds for any server:

- Little's law: requests in flight = completed per second x average latency. In a closed loop
  (each connection sends its next request when the last one ends) it cannot exceed the
  connections, so it says how many requests the server actually held at once;
- the ideal: connections / wait, what a server that holds every connection's request for exactly
  the wait serves;
- the thread ceiling: processes x threads / wait, where requests hold a thread while they wait;
- the CPU ceiling: the rate at which the server's cores would be full, from its measured CPU per
  answered request; one process (one interpreter) has one core at most, whatever the machine.

A row whose RPS is above its rate of 200 answers counts errors (a closed connection, a request cut
off at the deadline) as if they were answers: that is always said, with the errors by kind.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

NEAR_IDEAL = 0.85  # a 200-rate this close to connections / wait is "at the ideal"
CPU_FULL = 0.85  # a server using this share of the cores it can use is CPU-bound
HOST_FULL = 0.90  # the machine's cores this busy (server + client + the rest) are the limit
COUNTED_ERRORS = 0.01  # RPS above the 200-rate by more than this share counts errors
LITTLE_NOISE = 0.05  # Little's law above the connections by more than this is a measuring fault
BEHIND = 0.5  # a thread-bound row under this share of its ceiling started behind stale requests
PUBLISHED_S = 10.0  # the harness's `-z 10s`: its "Total requests" over this is its 200-rate


@dataclass(frozen=True)
class Reading:
    """One measured (or published) row as the explanation reads it."""

    connections: int
    sleep_s: float
    rps: float  # every finished request per second (oha's requestsPerSec)
    ok_rps: float  # 200 answers per second
    avg_ms: float
    processes: int = 1
    threads: int = 0  # per process, where requests hold a thread while they wait; 0: not bound
    cores: int = 0  # the machine's CPUs (0: unknown, as for a published row)
    server_cpu_pct: float = float("nan")  # 100 = one core
    client_cpu_pct: float = float("nan")
    host_cpu_pct: float = float("nan")  # every core of the machine: 100 x cores when all are busy
    errors: Mapping[str, int] = field(default_factory=dict)
    non_200: int = 0  # answers with another status

    @property
    def ideal(self) -> float:
        return self.connections / self.sleep_s

    @property
    def in_flight(self) -> float:
        """Little's law on the 200 answers and their average latency: requests in the system
        (held or queued) at once. In a closed loop it cannot exceed the connections."""
        return little(self.ok_rps, self.avg_ms)

    @property
    def held(self) -> float:
        """Little's law on the 200 answers and the wait: requests the server held in their wait
        at once (its effective concurrency), whatever queued in front of it."""
        return self.ok_rps * self.sleep_s

    @property
    def thread_ceiling(self) -> float:
        return self.processes * self.threads / self.sleep_s if self.threads else math.inf

    @property
    def usable_cores(self) -> int:
        return min(self.processes, self.cores) if self.cores else self.processes

    @property
    def cpu_ceiling(self) -> float:
        """200 answers/s at which the cores the server can use would be full (inf: unmeasured)."""
        if not self.server_cpu_pct > 0 or not self.ok_rps:
            return math.inf
        return self.ok_rps * 100 * self.usable_cores / self.server_cpu_pct

    @property
    def cpu_us_per_answer(self) -> float:
        return self.server_cpu_pct / 100 / self.ok_rps * 1e6 if self.ok_rps else math.nan


def per_s(x: float) -> str:
    """A rate as the words show it: whole from 100 a second, one decimal under."""
    return f"{x:,.0f}" if x >= 100 else f"{x:,.1f}"


def little(rate: float, avg_ms: float) -> float:
    """Little's law: requests in flight = rate x average time in the system."""
    return rate * avg_ms / 1000


def counts_errors(r: Reading) -> bool:
    """The row's RPS counts finished requests that were not 200 answers."""
    return r.rps > r.ok_rps * (1 + COUNTED_ERRORS)


def limit(r: Reading) -> tuple[str, str]:
    """(name, words with figures) of what bounds the row's 200-rate, the first that holds of:
    its threads, nothing answered, the ideal, the server's CPU, the machine's CPU."""
    if r.thread_ceiling < r.ideal * NEAR_IDEAL:
        n = r.processes * r.threads
        what = "one thread" if n == 1 else f"{n} threads"
        return what, (
            f"{what}: {n} request(s) at a time, a ceiling of {n} / {r.sleep_s:g} s = "
            f"{r.thread_ceiling:,.0f} req/s, against the ideal {r.ideal:,.0f}"
        )
    if r.ok_rps <= 0:
        return "no answers", "not one 200 answer"
    if r.ok_rps >= r.ideal * NEAR_IDEAL:
        return "the ideal", f"the ideal: {r.connections} / {r.sleep_s:g} s = {r.ideal:,.0f} req/s"
    cores = r.usable_cores
    if r.server_cpu_pct >= 100 * cores * CPU_FULL:
        where = "one process on one core" if cores == 1 else f"{cores} processes on {cores} cores"
        return where, (
            f"{where}: server CPU {r.server_cpu_pct:.0f}% ({r.cpu_us_per_answer:,.0f} us of CPU "
            "per answer)"
        )
    if r.cores and r.host_cpu_pct >= 100 * r.cores * HOST_FULL:
        return "the machine's cores", (
            f"the machine's {r.cores} cores, shared: server {r.server_cpu_pct:.0f}%, client "
            f"(oha) {r.client_cpu_pct:.0f}%, all {r.host_cpu_pct:.0f}% of {100 * r.cores}%"
        )
    return "not found", (
        f"none measured: {r.ok_rps / r.ideal:.0%} of the ideal with server CPU "
        f"{r.server_cpu_pct:.0f}% and the machine at {r.host_cpu_pct:.0f}% of {100 * r.cores}%"
    )


def errors_words(r: Reading) -> str:
    """The errors by kind, and the answers that were not 200."""
    kinds = [f"{n:,} {kind}" for kind, n in sorted(r.errors.items(), key=lambda kv: -kv[1])]
    if r.non_200:
        kinds.append(f"{r.non_200:,} answers other than 200")
    return "; ".join(kinds) if kinds else "no errors"


def verdict(r: Reading) -> str:
    """The row's own verdict: Little's law, the ceiling, the limit, the errors."""
    wait = r.sleep_s * 1000
    said = (
        f"Little: {per_s(r.ok_rps)} answers/s x {wait:g} ms wait = {per_s(r.held)} held at once, "
        f"x {r.avg_ms:,.1f} ms latency = {r.in_flight:,.0f} in the system of {r.connections} "
        f"connections; limit: {limit(r)[1]}"
    )
    if counts_errors(r):
        said += (
            f"; RPS counts errors: {per_s(r.ok_rps)} of {per_s(r.rps)}/s were 200 "
            f"({errors_words(r)})"
        )
    elif r.errors or r.non_200:
        said += f"; {errors_words(r)}"
    return said


def published_reading(pub: Mapping[str, Any], connections: int, sleep_s: float) -> Reading:
    """A published row as a Reading: its 200-rate is "Total requests" over the harness's 10 s."""
    return Reading(
        connections=connections,
        sleep_s=sleep_s,
        rps=float(pub["rps"]),
        ok_rps=float(pub["total"]) / PUBLISHED_S,
        avg_ms=float(pub["avg_ms"]),
        threads=int(pub.get("threads", 0)),
    )


def explain(pub: Mapping[str, Any], m: Reading, cpus: int) -> str:
    """Why the measured row differs from the published one, from what each says of itself."""
    p = published_reading(pub, m.connections, m.sleep_s)
    head = (
        f"Published {p.rps:,.0f} RPS, {per_s(p.ok_rps)} answers 200/s at {p.avg_ms:,.1f} ms on "
        f"{cpus} CPUs (Little: {per_s(p.held)} held at once); here {per_s(m.rps)} RPS, "
        f"{per_s(m.ok_rps)} answers 200/s at {m.avg_ms:,.1f} ms."
    )
    name, words = limit(m)
    if counts_errors(p):
        head += (
            f" The page's RPS counts errors: {per_s(p.ok_rps)} of its {p.rps:,.0f}/s were 200 "
            f"answers, under the ceiling of {limit(p)[1]}."
        )
    if name in ("one process on one core", "the machine's cores") or name.endswith(" cores"):
        head += (
            f" Here the limit is {words}; the ideal {m.ideal:,.0f} req/s needs "
            f"{m.ideal * m.cpu_us_per_answer / 1e6:,.1f} cores at this cost, and oha itself used "
            f"{m.client_cpu_pct:.0f}% of this machine's {m.cores} CPUs (the page's had {cpus} for "
            "both)."
        )
    else:
        head += f" Here the limit is {words}."
    if counts_errors(m):
        head += f" Here too RPS counts errors: {errors_words(m)}."
    return head + behind(p, "the page's run") + behind(m, "this run")


def behind(r: Reading, which: str) -> str:
    """Why a thread-bound row answered far below its thread ceiling: the run starts behind the
    requests of the warm-up that the client cut off at its deadline and the server still serves,
    each for the whole wait (the harness's warm-up runs at the test's connections)."""
    if r.thread_ceiling == math.inf or r.ok_rps >= r.thread_ceiling * BEHIND:
        return ""
    backlog_s = r.connections * r.sleep_s / (r.processes * r.threads)
    return (
        f" In {which} the thread(s) answered {r.ok_rps:,.1f}/s of their {r.thread_ceiling:,.0f}: "
        f"the run began behind the warm-up's {r.connections} requests, cut off by the client at "
        f"its deadline but still served by the server for their whole wait, up to "
        f"{backlog_s:,.1f} s of work before the run's own requests."
    )
