"""The advice: per model, whether it meets the target, configured how, at what cost, what limits it
next; then the recommendation, the cheapest model that meets it (ties called ties).

A pure function of the search's conclusion and the steps it measured. Figures that were not
measured are projections from the measured cost per request and always say so: a projection
assumes the cost per request stays flat as the load grows, so it is an estimate, never a result.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from lab.advise.search import Attempt, Conclusion, Setting
from lab.advise.target import Slo, failures
from lab.config.models import Knobs, Model
from lab.record.errors import EXIT_NO_ANSWER, EXIT_NOT_CONFIRMED, EXIT_ONLY_PORT
from lab.record.models import AS_IS, ASYNC_PORT, BRIDGED
from lab.record.step import StepRecord
from lab.verdict.difference import NO_FLOOR, TIE, Side, differ
from lab.verdict.facts import upstream_inflight
from lab.verdict.limits import TITLES

UNCHANGED = (AS_IS, BRIDGED)  # runs the user's app without rewriting it
COMMAND_HOST, COMMAND_PORT = "127.0.0.1", 8000  # the command line as `lab models --max-users`


@dataclass(frozen=True)
class Confirm:
    """The deciding step: at the target rate when the search got there."""

    rate_rps: float  # offered (open loop)
    throughput_rps: float
    p99_ms: float | None  # None: nothing answered
    errors: int  # dropped and unanswered included
    error_rate: float
    config: str  # the step's `model` in steps.jsonl


@dataclass(frozen=True)
class ModelAdvice:
    model: str
    meets: bool
    knobs: dict[str, int]  # the deciding step's configuration ({} when nothing was measured)
    configuration: str  # the same in words, e.g. "1 process x 45 threads"
    command: str
    cores: int  # cores the configuration takes: its processes, at most the server's cores
    cpu_pct: float  # server CPU measured, % of one core
    pss_mb: float  # peak memory of the server's process tree, each page once (PSS summed)
    confirm: Confirm | None
    limited_by: str
    limit: str  # what limits it, with figures
    reason: str
    projection: str  # labelled as one; "" when there is nothing to project from
    steps: int  # steps the search measured for this model
    runs_app: str = AS_IS  # as is, bridged or async port (lab.record.models.runs_app)


def model_advice(
    model: Model,
    st: Setting,
    end: Conclusion,
    tried: Sequence[tuple[Attempt, StepRecord]],
    base: Knobs,
) -> ModelAdvice:
    """One model's line of the advice, from how its search ended and the steps it measured."""
    if not tried:
        return ModelAdvice(
            model=model.name,
            meets=False,
            knobs={},
            configuration="",
            command="",
            cores=0,
            cpu_pct=0.0,
            pss_mb=0.0,
            confirm=None,
            limited_by=end.limited_by,
            limit=end.reason if end.limited_by else "",
            reason=end.reason,
            projection=_pool_projection(model, st),
            steps=0,
            runs_app=model.runs_app(),
        )
    attempt, step = tried[-1]
    knobs = model.knobs_for(attempt.candidate.knobs(base))
    confirm = _confirm(step)
    # the search's conclusion names the cause
    limited_by = end.limited_by or step.evidence.limited_by
    title = TITLES.get(limited_by, limited_by)
    limit = end.reason if end.limited_by else f"{title}: {step.evidence.limit_reason}"
    return ModelAdvice(
        model=model.name,
        meets=end.meets,
        knobs={k: int(v) for k, v in vars(knobs).items()},
        configuration=attempt.candidate.words(model),
        command=shlex.join(model.command(knobs, COMMAND_HOST, COMMAND_PORT)),
        cores=min(attempt.candidate.processes, st.bounds.cores),
        cpu_pct=step.resources.deployed_cpu_pct,
        pss_mb=_pss_mb(step),
        confirm=confirm,
        limited_by=limited_by,
        limit=limit,
        reason=end.reason,
        projection=projection(model, st, attempt, step, end.meets),
        steps=len(tried),
        runs_app=model.runs_app(),
    )


def _confirm(step: StepRecord) -> Confirm:
    """The confirming step's figures: its target rate, throughput, p99 and failures."""
    failed, rate = failures(step)
    p99 = step.latency.latency_ms.get("p99")
    return Confirm(
        step.rate_rps or 0.0,
        step.load.throughput_rps,
        p99 if p99 is not None and math.isfinite(p99) else None,
        failed,
        round(rate, 5),
        step.model,
    )


def _pss_mb(step: StepRecord) -> float:
    """The server's memory, each page once; a step without PSS: RSS, its bound."""
    return step.resources.server_pss_mb or step.resources.server_rss_mb


def projection(model: Model, st: Setting, attempt: Attempt, step: StepRecord, meets: bool) -> str:
    """What the measured cost per request projects: what runs out next where the target is met,
    what the target would need where it is not."""
    cost = step.resources.deployed_cpu_ms_per_req  # nginx's too, where it ran on the server's cores
    if not cost or step.load.ok <= 0:
        return ""
    latency = max(st.service_ms, step.latency.latency_ms.get("mean", 0.0))
    c = attempt.candidate
    if meets:
        cores = min(c.processes, st.bounds.cores)
        cpu_top = cores * 1000 / cost
        pool_top = c.holds() * 1000 / latency
        return (
            f"projection: {_cores(cores)} full at about {cpu_top:,.0f} req/s ({cost:.2f} ms CPU "
            f"per request); the pool of {c.holds()} holds about {pool_top:,.0f} req/s at "
            f"{latency:,.0f} ms each"
        )
    rps = st.slo.rps
    cores_needed = rps * cost / 1000
    needs = f"projection: {rps:,g} req/s needs about {cores_needed:,.3g} cores at {cost:.2f} ms "
    if cores_needed <= st.bounds.cores:
        return f"{needs}per request, within the {_cores(st.bounds.cores)} this server may use"
    inflight = rps * latency / 1000
    processes = math.ceil(inflight) if st.bounds.one_per_process else math.ceil(cores_needed)
    memory = _memory_mb(step, c.processes, processes, inflight)
    return (
        f"{needs}per request and {_size(memory)} ({inflight:,.0f} requests in flight at "
        f"{latency:,.0f} ms)"
    )


def _pool_projection(model: Model, st: Setting) -> str:
    """Where the knob limits stopped the search before any step: what Little's law asks."""
    need = st.slo.rps * st.service_ms / 1000
    if st.bounds.one_per_process or need <= 0:
        return ""
    per = st.bounds.workers[1]
    processes = math.ceil(need / per)
    return (
        f"projection: {need:,.0f} requests in flight need {processes} processes of {per} "
        f"{model.unit}s, {_cores(processes)}; this server may use {_cores(st.bounds.cores)}"
    )


def _memory_mb(step: StepRecord, processes_now: int, processes: int, inflight: float) -> float:
    """The step's RSS split into each process at rest and each request in flight, scaled."""
    kb = step.resources.server_rss_kb_per_conn or 0.0
    idle = max(step.resources.server_rss_mb - kb * max(upstream_inflight(step), 0) / 1024, 0.0)
    return idle / max(processes_now, 1) * processes + kb * inflight / 1024


@dataclass(frozen=True)
class Advice:
    slo: Slo
    models: tuple[ModelAdvice, ...]
    run_dir: str
    complete: bool  # False while the search runs, or when it was stopped

    def recommended(self) -> tuple[str, ...]:
        """The cheapest model that meets the target and runs the user's app unchanged (as it is,
        or through a bridge): fewest cores, then least memory (PSS, shared pages counted once,
        so a pre-fork master and worker are not charged twice); then those tied with it; ()
        when none does."""
        return self._cheapest(UNCHANGED)

    def if_ported(self) -> tuple[str, ...]:
        """The same among the models that need the app ported to async (ASGI): what a port
        would buy, shown beside the recommendation, never instead of it."""
        return self._cheapest((ASYNC_PORT,))

    def meets(self) -> bool:
        return any(m.meets for m in self.models)

    def _cheapest(self, kinds: tuple[str, ...]) -> tuple[str, ...]:
        candidates = (m for m in self.models if m.meets and m.runs_app in kinds)
        meeting = sorted(candidates, key=lambda m: (m.cores, m.pss_mb, m.model))
        if not meeting:
            return ()
        best = meeting[0]
        tied = [m.model for m in meeting[1:] if m.cores == best.cores and memory_tie(best, m)]
        return (best.model, *tied)

    def held_back(self) -> tuple[ModelAdvice, ...]:
        """Models that missed because of the lab's own apparatus: nothing is known about them."""
        return tuple(m for m in self.models if not m.meets and m.limited_by == "apparatus")

    def unconfirmed(self) -> tuple[ModelAdvice, ...]:
        """The held-back models that leave the answer open: with no recommendation, those that
        run the app as it is (whether it needs a port is then not known), or, when nothing met
        the target at all, any of them; () when the answer stands."""
        if self.recommended():
            return ()
        as_is = tuple(m for m in self.held_back() if m.runs_app in UNCHANGED)
        return as_is or (() if self.meets() else self.held_back())

    def exit_code(self) -> int:
        """0 only when a model runs the app as it is: a CI gate must not pass a Flask app that
        nothing serves unchanged because an async port of it would meet the target. 4 (not
        confirmed: the lab's own limit) wins over 5: "nothing serves the app as it is" is said
        only where every model that runs it so was measured to miss."""
        if self.recommended():
            return 0
        if self.unconfirmed():
            return EXIT_NOT_CONFIRMED
        return EXIT_ONLY_PORT if self.if_ported() else EXIT_NO_ANSWER

    def sentence(self) -> str:
        """The recommendation for the app as it is, and beside it what an async port buys; no
        verdict where the lab's own generators held back a model that could have decided it."""
        ported = self.if_ported()
        port = f"; if you port it to async (ASGI): {self._pick(ported)}" if ported else ""
        if held := self.unconfirmed():
            reached = max(m.confirm.throughput_rps if m.confirm else 0.0 for m in held)
            names = ", ".join(m.model for m in held)
            return (
                f"not confirmed on this machine: the lab's generators reached {reached:,.0f} req/s "
                f"({names}; {self.slo.words} needs more generator cores: --remote-generators with "
                f"`lab generator --connect`, or a bigger machine){port}"
            )
        if not self.meets():
            return f"no model meets {self.slo.words} on this machine"
        picked = self.recommended()
        first = (
            f"recommended for your app as it is: {self._pick(picked)}"
            if picked
            else "no model that runs your app as it is meets the target"
        )
        return first + port

    def _pick(self, picked: tuple[str, ...]) -> str:
        best = next(m for m in self.models if m.model == picked[0])
        how = " through a bridge" if best.runs_app == BRIDGED else ""
        tied = (
            f"; tied with {', '.join(picked[1:])} (as many cores, no measurable difference in PSS)"
            if picked[1:]
            else ""
        )
        return f"{best.model}{how} ({_cores(best.cores)}, {best.pss_mb:,.0f} MB PSS){tied}"

    def to_json(self) -> dict[str, Any]:
        picked = self.recommended()
        return {
            "slo": self.slo.to_json(),
            "models": [asdict(m) for m in self.models],
            "recommended": picked[0] if picked else None,
            "tied": list(picked[1:]),
            "if_ported": self.if_ported()[0] if self.if_ported() else None,
            "recommendation": self.sentence(),
            "run_dir": self.run_dir,
            "complete": self.complete,
        }


def memory_tie(a: ModelAdvice, b: ModelAdvice) -> bool:
    """Whether two configurations' memory (PSS) is a tie by the one test of difference
    (lab.verdict.difference). Memory has no run-to-run floor measured (`noise.toml` holds
    throughput's and p99's), so a one-step PSS has no interval and the test's rule for a
    figure without one decides: within `T.difference_without_interval_share` of the cheaper is
    no difference."""
    cheaper, other = (Side("pss_mb", m.pss_mb, (m.pss_mb,)) for m in (a, b))
    return differ(cheaper, other, NO_FLOOR).word == TIE


def _cores(n: float) -> str:
    return f"{n:g} core" + ("" if n == 1 else "s")


def _size(mb: float) -> str:
    return f"{mb / 1024:,.1f} GB" if mb >= 1024 else f"{mb:,.0f} MB"
