"""Where to look for a model's cheapest configuration: candidates from what is already known.

Two laws size a candidate (lab.verdict.sizing: Little's law for the pool, the cost per request for
the processes), so the search confirms instead of sweeping. W in Little's law is the service time
d before any step, then the latency measured.

`next_move` is a pure function of the steps measured so far, so a resumed search replays the
recorded steps and goes on where it stopped. Per model:

1. A p99 limit at or below d, or knob limits that hold fewer requests than R x d, cannot meet
   the target: said without a step.
2. The first step: one process and the pool for R. It is at R itself (the step confirms) up to
   CALIBRATION_RPS; above that it is at CALIBRATION_RPS, to measure the cost per request first:
   a step at a rate far beyond the machine would measure the lab's own apparatus, not the model.
3. After that calibration: when R x c is more than the cores the server may use, the model does
   not meet the target, by projection from the measured cost (said as one); otherwise processes
   from R x c and the pool from R x the measured latency, and the step at R.
4. After a step at R that misses: a step whose generators were saturated (measured again with
   more of them, up to the client cores, before it gets here) is not confirmed on this machine,
   the lab's limit and not the model's; a full pool doubles; a busy CPU gets one more process
   (within the cores); anything else no knob changes, and the model does not meet the target.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from lab.advise.target import Slo, confirmed, p99_meets, unfair
from lab.config.models import Model
from lab.config.scenario import LIMITS
from lab.record.step import StepRecord
from lab.record.thresholds import T
from lab.run import generators
from lab.verdict.facts import upstream_inflight
from lab.verdict.sizing import Bounds, Candidate, clamp, for_rate, little, plural, sized

CALIBRATION_RPS = 500.0  # above this target, measure the cost per request here first
BUSY = T.server_cpu_busy_share  # server CPU at this share of its cores: the CPU makes them wait
FULL = T.advise_full_pool_share  # requests in flight at this share of the pool: it is full
QUEUED = T.advise_queued_delays  # p99 this many service times: requests waited somewhere
OUTSTANDING = 2.0  # the generator's cap on requests in flight: rate x this many p99 limits
MIN_OUTSTANDING = 16
MAX_STEPS = 5  # per model; a search that has not met the target by then stops


@dataclass(frozen=True)
class Setting:
    """What the search of one model knows before any step."""

    slo: Slo
    service_ms: float  # d: the load route's time with nothing else running
    bounds: Bounds


@dataclass(frozen=True)
class Attempt:
    """A step to measure: a candidate at an arrival rate, and why it was chosen."""

    candidate: Candidate
    rate: float
    role: str  # calibrate (the cost per request) or confirm (at the target)
    why: str


@dataclass(frozen=True)
class Conclusion:
    """How a model's search ended: it meets the target or not, and why, with the figures."""

    meets: bool
    reason: str
    limited_by: str = ""  # when no step says it (knob limits before any step)


Move = Attempt | Conclusion


def next_move(model: Model, st: Setting, tried: Sequence[tuple[Attempt, StepRecord]]) -> Move:
    """The next step to measure for `model`, or what the steps measured so far conclude."""
    if not tried:
        return _first(model, st)
    attempt, step = tried[-1]
    if attempt.role == "calibrate" and not _costed(step):
        why = unfair(step) or step.evidence.limit_reason
        return Conclusion(False, f"no cost per request measured at {attempt.rate:,g} req/s: {why}")
    if attempt.role == "calibrate":
        move = _after_calibration(model, st, step)
    else:
        move = _after_confirm(model, st, attempt, step)
    if isinstance(move, Attempt) and len(tried) >= MAX_STEPS:
        return Conclusion(False, f"not met within {MAX_STEPS} steps ({move.why})")
    if isinstance(move, Attempt) and any(_same(move, a) for a, _ in tried):
        return Conclusion(False, f"no other configuration to try ({move.why})")
    return move


def _first(model: Model, st: Setting) -> Move:
    if st.slo.p99_ms <= st.service_ms:
        return Conclusion(
            False,
            f"every request waits at least the service time, {st.service_ms:g} ms, so no "
            f"configuration gives a p99 under {st.slo.p99_ms:g} ms",
            "upstream",
        )
    need = st.slo.rps * st.service_ms / 1000
    if st.bounds.most < need:
        return Conclusion(
            False,
            f"its knob limits hold at most {st.bounds.most} requests at once: "
            f"{st.bounds.words(model)}; {st.slo.rps:,g} req/s x {st.service_ms:g} ms keeps "
            f"{need:,.0f} in flight (Little's law)",
            "concurrency_cap",
        )
    rate = min(st.slo.rps, CALIBRATION_RPS)
    candidate = sized(st.bounds, rate, st.service_ms, 1)
    why = little(rate, st.service_ms, candidate, model.unit)
    if rate < st.slo.rps:
        return Attempt(candidate, rate, "calibrate", f"{why}; the cost per request first")
    return Attempt(candidate, rate, "confirm", why)


def _costed(step: StepRecord) -> bool:
    """A calibration that measured the server's cost per request: answers, and nothing excludes
    it but the apparatus (the server's own CPU per request stays the server's)."""
    faults = set(step.evidence.excluded_by) - {"lab_limited"}
    return step.load.ok > 0 and not faults and bool(step.resources.deployed_cpu_ms_per_req)


def _cpu(step: StepRecord) -> str:
    """Whose CPU: where nginx ran beside the server on its cores, it counts with the server's."""
    return "server and nginx CPU" if step.resources.front_cpu_pct >= 0 else "server CPU"


def _after_calibration(model: Model, st: Setting, step: StepRecord) -> Move:
    cost = step.resources.deployed_cpu_ms_per_req or 0.0
    latency = max(st.service_ms, step.latency.latency_ms.get("mean", 0.0))
    cores = st.slo.rps * cost / 1000
    if cores > st.bounds.cores:
        top = st.bounds.cores * 1000 / cost
        return Conclusion(
            False,
            f"server CPU: {st.slo.rps:,g} req/s x {cost:.2f} ms = {cores:,.1f} cores, more than "
            f"the {plural(st.bounds.cores, 'core')} this server may use, full at about {top:,.0f} "
            f"req/s (measured: {_cpu(step)} {step.resources.deployed_cpu_pct:.0f}% of a core at "
            f"{step.load.throughput_rps:,.0f} req/s)",
            "server_cpu",
        )
    sized = for_rate(model.unit, st.bounds, st.slo.rps, latency, cost)
    return Attempt(sized.candidate, st.slo.rps, "confirm", sized.why)


def _after_confirm(model: Model, st: Setting, attempt: Attempt, step: StepRecord) -> Move:
    missed = st.slo.misses(step)
    if not missed:
        return Conclusion(True, confirmed(step, st.slo))
    faults = set(step.evidence.excluded_by) - {"lab_limited"}
    if generators.saturated(step) and not faults:  # measured again with more first (confirm.py)
        return Conclusion(False, _not_confirmed(st, step), "apparatus")
    words = "; ".join(missed)
    if not step.load.ok or step.evidence.excluded_by or step.evidence.limited_by == "apparatus":
        return Conclusion(False, f"{words}: {step.evidence.limit_reason or 'nothing measured'}")
    c = attempt.candidate
    cores = min(c.processes, st.bounds.cores)
    if step.resources.deployed_cpu_pct >= BUSY * 100 * cores:
        if st.bounds.one_per_process or c.processes >= st.bounds.processes[1]:
            cpu = f"{_cpu(step)} {step.resources.deployed_cpu_pct:.0f}% of {plural(cores, 'core')}"
            return Conclusion(False, f"{words}: {cpu}, and no more cores for this server")
        p = c.processes + 1
        more = Candidate(p, clamp(math.ceil(c.holds() / p), st.bounds.workers))
        return Attempt(more, attempt.rate, "confirm", f"{words} with the CPU busy: {p} processes")
    if _pool_full(step, c):
        why = f"{words} with the pool of {c.holds()} full: twice the pool"
        return Attempt(_doubled(c, st.bounds), attempt.rate, "confirm", why)
    if c.holds() < outstanding(st.slo, attempt.rate) and _waited(step, st):
        why = (
            f"{words} with the CPU idle and {_inflight(step):.0f} of {c.holds()} requests in "
            "flight: they wait before the pool (keep-alive connections can hold a pool that "
            "counts connections): twice the pool"
        )
        return Attempt(_doubled(c, st.bounds), attempt.rate, "confirm", why)
    return Conclusion(
        False,
        f"{words}, with CPU and pool to spare ({_cpu(step)} "
        f"{step.resources.deployed_cpu_pct:.0f}%, {_inflight(step):.0f} of {c.holds()} in flight): "
        f"no knob changes that ({step.evidence.limit_reason})",
    )


def _not_confirmed(st: Setting, step: StepRecord) -> str:
    """A miss the lab's own apparatus caused, on the most generators this machine gives: what
    they reached, never a verdict on the model."""
    missed = st.slo.figures_miss(step, flags=False)
    how = "; ".join(missed) if missed else f"the figures meet it: {confirmed(step, st.slo)}"
    return (
        "not confirmed on this machine: the lab's generators reached "
        f"{step.load.throughput_rps:,.0f} req/s on "
        f"{plural(step.load.generators, 'generator process')} ({how}; {step.evidence.limit_reason})"
    )


def outstanding(slo: Slo, rate: float) -> int:
    """The generator's cap on requests in flight (each on a connection of its own) at `rate`:
    OUTSTANDING p99 limits' worth. A request out longer than that has missed the target anyway,
    and a pool as large as this holds every connection the generator opens."""
    cap = math.ceil(rate * slo.p99_ms / 1000 * OUTSTANDING)
    return max(MIN_OUTSTANDING, min(cap, LIMITS["level"]))


def _waited(step: StepRecord, st: Setting) -> bool:
    """Requests waited somewhere: p99 over the target as the one test says (beyond noise: the
    rule by which the step missed it, `target.p99_meets`) and over QUEUED service times."""
    p99 = step.latency.latency_ms.get("p99", math.inf)
    over = not p99_meets(st.slo.against(step, "p99", flags=False))
    return over and p99 > QUEUED * st.service_ms


def _pool_full(step: StepRecord, c: Candidate) -> bool:
    capped = {"capped", "capped_unexplained"} & set(step.evidence.flags)
    full = _inflight(step) >= FULL * c.holds()
    return bool(capped) or step.evidence.limited_by == "concurrency_cap" or full


def _inflight(step: StepRecord) -> float:
    """Requests in the server at once: seen by the upstream where the load went through it,
    else by Little's law."""
    seen = upstream_inflight(step)
    return float(seen if seen >= 0 else step.load.inferred_inflight)


def _doubled(c: Candidate, b: Bounds) -> Candidate:
    if b.one_per_process:
        return Candidate(clamp(c.processes * 2, b.processes), 1)
    return Candidate(c.processes, clamp(c.workers * 2, b.workers))


def _same(a: Attempt, b: Attempt) -> bool:
    return a.candidate == b.candidate and a.rate == b.rate
