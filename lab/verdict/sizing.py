"""Sizing a configuration from what was measured: Little's law for the pool, the cost per request
for the processes. One computation, which `lab advise` searches with (lab.advise.search) and the
answer for a user's app states as "the configuration to run" (analysis.interfaces).

- Little's law: R req/s that each take W ms keep R x W / 1000 requests in flight, so a pool
  (threads, greenlets, connections) of that size plus HEADROOM for bursts holds the load; a
  smaller one queues.
- CPU: R req/s at c ms of server CPU each keep R x c / 1000 cores busy; a configuration plans for
  PLAN_UTIL of each core, so that queueing for the CPU does not eat the p99.

Fewest cores first: one process unless the measured CPU says more, never more processes than the
cores the server may use (one CPython process computes on one core), except for a model that
serves one request per process, whose processes are its pool. Then least memory: the smallest pool
Little's law allows. Each model's knob limits bound both.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from lab.config.models import KNOB_MAX, KnobLimit, Knobs, Model, load_registry
from lab.record.errors import LabError
from lab.record.thresholds import T

HEADROOM = T.advise_pool_over_inflight  # the pool over Little's law's in-flight count
PLAN_UTIL = T.advise_plan_cpu_share  # the share of each core a configuration plans to keep busy


@dataclass(frozen=True)
class Bounds:
    """What one model may be given: its knob limits within KNOB_MAX, and the server's cores."""

    cores: int  # cores the server may use
    processes: tuple[int, int]  # (least, most)
    workers: tuple[int, int]
    one_per_process: bool  # the model serves one request per process (gunicorn-sync)

    @classmethod
    def of(cls, model: Model, cores: int) -> Bounds:
        return cls.within(model.unit, model.limits, cores)

    @classmethod
    def within(cls, unit: str, limits: tuple[KnobLimit, ...], cores: int) -> Bounds:
        """A model's bounds from its unit and knob limits (a recorded run has no Model)."""
        ranges = {knob: (1, KNOB_MAX[knob]) for knob in ("processes", "concurrency")}
        for limit in limits:
            if limit.knob in ranges:
                low, high = ranges[limit.knob]
                ranges[limit.knob] = (max(low, limit.min or low), min(high, limit.max or high))
        one = unit == "process"
        low, high = ranges["processes"]
        processes = (low, high if one else max(low, min(high, cores)))
        return cls(cores, processes, ranges["concurrency"], one)

    @property
    def most(self) -> int:
        """Requests the largest configuration allowed holds at once."""
        return self.processes[1] * (1 if self.one_per_process else self.workers[1])

    def words(self, model: Model) -> str:
        if self.one_per_process:
            return f"at most {self.processes[1]} processes (knob limit)"
        why = "the cores this server may use" if self.processes[1] <= self.cores else "knob limit"
        pool = next((lim for lim in model.limits if lim.knob == "concurrency" and lim.max), None)
        cap = (pool.why or "knob limit") if pool else "the lab's largest"
        pools = plural(self.workers[1], model.unit)
        return f"{plural(self.processes[1], 'process')} ({why}) x {pools} ({cap})"


@dataclass(frozen=True)
class Candidate:
    """A configuration to try: processes, and the pool of each (1 for one-per-process)."""

    processes: int
    workers: int

    def holds(self) -> int:
        return self.processes * self.workers

    def knobs(self, base: Knobs) -> Knobs:
        """`base` with this candidate's processes and pool; the outbound pools follow the pool
        (their "auto")."""
        w = self.workers
        return replace(base, processes=self.processes, concurrency=w, pool=w, db_pool=w)

    def name(self, model: Model) -> str:
        """The configuration's name in the run directory: its steps' `model`."""
        pool = "" if model.unit == "process" else f".w{self.workers}"
        return f"{model.name}.p{self.processes}{pool}"

    def words(self, model: Model) -> str:
        return configuration_words(self.processes, self.workers, model.unit)


def sized(b: Bounds, rate: float, latency_ms: float, processes: int) -> Candidate:
    """The smallest pool Little's law allows at `rate` (plus HEADROOM), on at least
    `processes` processes, within the model's bounds."""
    hold = max(1, math.ceil(rate * latency_ms / 1000 * HEADROOM))
    if b.one_per_process:
        return Candidate(clamp(max(processes, hold), b.processes), 1)
    p = clamp(max(processes, math.ceil(hold / b.workers[1])), b.processes)
    return Candidate(p, clamp(math.ceil(hold / p), b.workers))


def little(rate: float, latency_ms: float, c: Candidate, unit: str) -> str:
    hold = rate * latency_ms / 1000
    return (
        f"{rate:,g} req/s x {latency_ms:,.0f} ms = {hold:,.1f} in flight (Little's law), "
        f"+{HEADROOM - 1:.0%}: {configuration_words(c.processes, c.workers, unit)}"
    )


@dataclass(frozen=True)
class Sized:
    """A configuration for a rate, and the figures it came from, in words."""

    candidate: Candidate
    cores: float  # cores the rate keeps busy at the cost per request
    why: str


def for_rate(unit: str, b: Bounds, rate: float, latency_ms: float, cost_ms: float) -> Sized:
    """Processes from the CPU `rate` takes at `cost_ms` each (PLAN_UTIL of each core), the pool
    from Little's law at `latency_ms`, within the model's bounds."""
    cores = rate * cost_ms / 1000
    processes = 1 if b.one_per_process else max(1, math.ceil(cores / PLAN_UTIL))
    candidate = sized(b, rate, latency_ms, processes)
    why = (
        f"{cost_ms:.2f} ms CPU per request x {rate:,g} req/s = {cores:.2f} cores; "
        f"{little(rate, latency_ms, candidate, unit)}"
    )
    return Sized(candidate, cores, why)


def to_run(
    name: str, unit: str, rate: float, latency_ms: float, cost_ms: float, cores: int
) -> Sized:
    """`for_rate` for a model of a recorded run, on `cores`: its knob limits from the registry
    where it is one of the lab's models (a name with a variant suffix, `uwsgi-threads+nginx`,
    is its base model), else the lab's own bounds."""
    base = _registry().get(name.split("+")[0].split(".")[0])
    limits = base.limits if base is not None and base.unit == unit else ()
    return for_rate(unit, Bounds.within(unit, limits, cores), rate, latency_ms, cost_ms)


def _registry() -> dict[str, Model]:
    try:
        return dict(load_registry().models)
    except LabError:  # an unreadable registry: sized within the lab's own bounds
        return {}


def configuration_words(processes: int, workers: int, unit: str) -> str:
    """`2 processes x 40 threads` (one-per-process models: `4 processes`)."""
    if unit == "process":
        return plural(processes, "process")
    return f"{plural(processes, 'process')} x {plural(workers, unit)}"


def clamp(value: int, bounds: tuple[int, int]) -> int:
    return max(bounds[0], min(bounds[1], value))


def plural(count: int, unit: str) -> str:
    ending = "es" if unit.endswith("s") else "s"
    return f"{count} {unit}{'' if count == 1 else ending}"
