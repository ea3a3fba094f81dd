"""Confirming candidates: each one an ordinary open-loop step, measured by the sweep's machinery.

`Advisor` is a `Sweep` whose steps are chosen as it goes: per model, the search
(`lab.advise.search`) names a candidate and an arrival rate; the advisor starts the model's server
with that candidate's knobs, verifies and probes it, warms it up and measures one open-loop step,
exactly as `lab run --mode open --rates R` would, appends it to `steps.jsonl` and shows it on the
progress display. The search then reads the step and names the next candidate, or concludes.

A configuration is a model under its own name in the run directory (`uwsgi-threads.p1.w45`): the
step's `model`, its histogram and log are that name's, so `lab report` shows each configuration
tried as a model of its own and `lab compare` matches a configuration across runs. The manifest's
`models` lists the configurations measured at the target rate with their exact command lines and
knobs; `advise.configs` lists every configuration tried.

A confirmation whose generators were saturated is measured again on more generator processes
(twice as many each time, up to the client cores), as a further trial of the same configuration
and rate: on a big machine the answer must be the server's, not the lab's generator's.

Bounded: each model gets an equal share of the time left, and a step that would not end within
its share is not started (the model's advice then says so). Resumable: the search is a pure
function of the recorded steps, so a resumed run replays them and measures only what is missing.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from lab.advise.advice import Advice, ModelAdvice, model_advice
from lab.advise.search import (
    Attempt,
    Conclusion,
    Move,
    Setting,
    next_move,
    outstanding,
)
from lab.advise.target import Slo
from lab.backends.base import Backend
from lab.config.models import Model
from lab.record.rundir import write_json
from lab.record.step import StepKey, StepRecord
from lab.run import generators
from lab.run.generators import Generators
from lab.run.manifest import continued, model_entry
from lab.run.observe import Listener, Upstream
from lab.run.plan import Plan
from lab.run.steps import StepRunner
from lab.run.sweep import Sweep
from lab.verdict.sizing import Bounds


class Advisor(Sweep):
    """Searches each model of `plan` for its cheapest configuration that meets `slo`."""

    def __init__(
        self,
        plan: Plan,
        backend: Backend,
        listener: Listener,
        slo: Slo,
        budget_s: float,
        say: Callable[[str], None],
        recorded: dict[str, Any] | None = None,
    ) -> None:
        """`recorded`: the manifest of the advise run being resumed; its steps are reused."""
        super().__init__(plan, backend, listener)
        self.base, self.slo, self.budget_s, self.say = plan, slo, budget_s, say
        self.cores = server_cores(backend)
        self.kept: dict[StepKey, StepRecord] = {}
        self.advice: list[ModelAdvice] = []
        self.upstream: Upstream | None = None
        if recorded is not None:
            self.manifest = continued(recorded, self.manifest)
            self.kept = {
                r.key: r for r in self.run_dir.steps() if "interrupted" not in r.evidence.flags
            }
        else:
            advise = {"slo": slo.to_json(), "budget_s": budget_s, "configs": {}}
            self.manifest.update(models={}, advise=advise)

    def measure_all(self) -> None:
        assert self.runner is not None
        self.upstream = self.runner.upstream
        deadline = time.monotonic() + self.budget_s
        models = self.base.models
        for i, model in enumerate(models):
            share = (deadline - time.monotonic()) / (len(models) - i)
            self.advice.append(self.search(model, time.monotonic() + share))
            self.write_advice(complete=i == len(models) - 1)

    def search(self, model: Model, until: float) -> ModelAdvice:
        """The model's search, step after step, until it concludes or its time is up."""
        st = Setting(self.slo, self.base.scenario.delay_ms, Bounds.of(model, self.cores))
        tried: list[tuple[Attempt, StepRecord]] = []
        move: Move = next_move(model, st, tried)
        while isinstance(move, Attempt):
            if not self.fits(model, move, until):
                when = "before its first step" if not tried else "before its next step"
                move = Conclusion(False, f"the time budget ran out {when} ({move.why})")
                break
            trying = f"{move.candidate.words(model)} at {move.rate:,g} req/s"
            self.say(f"{model.name}: {trying}: {move.why}")
            tried.append((move, self.measure(model, move, until)))
            move = next_move(model, st, tried)
        advice = model_advice(model, st, move, tried, self.base.knobs)
        mark = "meets the target" if advice.meets else "does not meet the target"
        self.say(f"{model.name} {mark}: {advice.reason}")
        return advice

    def fits(self, model: Model, move: Attempt, until: float, trial: int = 1) -> bool:
        """Recorded steps cost nothing; a new one must end within the model's share."""
        if self.step_key(model, move, trial) in self.kept:
            return True
        return time.monotonic() + self.candidate_plan(model, move).expected_seconds() <= until

    def measure(self, model: Model, move: Attempt, until: float) -> StepRecord:
        """The step of `move`; a confirmation whose generators were saturated is measured again
        with more of them (as a further trial), up to the client cores, before anything is
        concluded from it."""
        fleet = self.base.generators
        step = self.measured(model, move, 1, fleet)
        while move.role == "confirm" and generators.saturated(step):
            more = self.base.generators.more(max(1, step.load.generators - fleet.remote))
            if more is None or not self.fits(model, move, until, step.trial + 1):
                break
            self.say(
                f"{model.name}: the generators were saturated ({step.evidence.limit_reason}); "
                f"measuring again on {more + fleet.remote} generator processes"
            )
            fleet = replace(fleet, local=more, auto=False)
            step = self.measured(model, move, step.trial + 1, fleet)
        return step

    def measured(self, model: Model, move: Attempt, trial: int, fleet: Generators) -> StepRecord:
        """The step of `move` as trial `trial` on `fleet`: recorded before (a resume), or
        measured now as a one-model, one-rate sweep of the configuration."""
        key = self.step_key(model, move, trial)
        if key not in self.kept:
            assert self.upstream is not None
            plan = replace(self.candidate_plan(model, move), generators=fleet)
            plan.scenario.check_open_files()
            self.plan, self.s = plan, plan.scenario
            self.runner = StepRunner(plan, self.backend, self.upstream, self.listener)
            self.note_config(model, move, plan)
            self.run_model(plan.models[0], trial)
        return self.kept[key]

    def record(self, step: StepRecord) -> None:
        super().record(step)
        self.kept[step.key] = step

    def step_key(self, model: Model, move: Attempt, trial: int = 1) -> StepKey:
        return StepKey(move.candidate.name(model), "open", None, move.rate, trial)

    def candidate_plan(self, model: Model, move: Attempt) -> Plan:
        """The base plan narrowed to one configuration at one rate."""
        config = replace(model, name=move.candidate.name(model))
        scenario = replace(
            self.base.scenario,
            rates=(move.rate,),
            max_outstanding=outstanding(self.slo, move.rate),
            models=(config.name,),
        )
        checked = self.base.preflights.get(model.name)  # a user's app: checked by appcheck
        return replace(
            self.base,
            scenario=scenario,
            models=(config,),
            knobs=move.candidate.knobs(self.base.knobs),
            preflights={config.name: checked} if checked else {},
        )

    def note_config(self, model: Model, move: Attempt, plan: Plan) -> None:
        """The configuration in the manifest: every one under `advise.configs`, those measured at
        the target under `models` too (what `lab report` reads)."""
        config = plan.models[0]
        entry = {**model_entry(config, plan.knobs), "knobs": vars(config.knobs_for(plan.knobs))}
        tried = {**entry, "model": model.name, "role": move.role, "rate_rps": move.rate}
        self.manifest["advise"]["configs"][config.name] = tried
        if move.rate == self.slo.rps:
            self.manifest["models"][config.name] = entry
        self.write_manifest()

    def result(self, complete: bool) -> Advice:
        return Advice(self.slo, tuple(self.advice), str(self.run_dir.path), complete)

    def write_advice(self, complete: bool) -> None:
        write_json(self.run_dir.path / "advice.json", self.result(complete).to_json())


def server_cores(backend: Backend) -> int:
    """Cores the server may use: those it is pinned to, else every core the lab may use."""
    layout = backend.describe().get("cpu_layout") or {}
    return len(layout.get("server") or ()) or len(os.sched_getaffinity(0))
