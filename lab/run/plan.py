"""What a run will measure: the scenario, the models, the resolved knobs, where results go."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lab.config.models import Knobs, Model
from lab.config.scenario import Scenario
from lab.record.rundir import RunDir
from lab.run.generators import Generators
from lab.run.preflight import Preflight


@dataclass(frozen=True)
class Plan:
    scenario: Scenario
    models: tuple[Model, ...]
    knobs: Knobs  # resolved: command line > scenario > model defaults
    run: RunDir
    allow_remote: bool = False  # --allow-remote: load may leave loopback
    limits: dict[str, int] = field(default_factory=dict)  # open files needed and applied
    invocation: dict[str, Any] = field(default_factory=dict)  # the CLI options, for --resume
    generators: Generators = Generators()  # load-generator processes per step
    preflights: dict[str, Preflight] = field(default_factory=dict)  # done before the run, by
    # model (a user's app: by lab.run.appcheck); the sweep's own preflight is for the lab's app

    @property
    def run_dir(self) -> Path:
        return self.run.path

    @property
    def run_id(self) -> str:
        return self.run.run_id

    def expected_seconds(self) -> float:
        """A rough duration for the progress bar: start-up, probe, warm-up and every step."""
        s = self.scenario
        return s.trials * len(self.models) * self.model_seconds(len(s.points()))

    def model_seconds(self, steps: int) -> float:
        """A rough duration of one model's turn: start-up, probe, warm-up and `steps` steps."""
        s = self.scenario
        per_step = s.settle_s + s.duration_s + 2.0
        per_model = 4.0 + s.probe_delay_ms / 500 + s.warmup_s + s.settle_s + 2.0
        return per_model + steps * per_step


def resolve_knobs(defaults: Knobs, scenario: Scenario, command_line: dict[str, Any]) -> Knobs:
    """Knob precedence: the command line beats the scenario file, which beats model defaults."""
    from_scenario = defaults.updated(scenario.knobs, f"scenario {scenario.name}: [knobs]")
    chosen = from_scenario.updated(command_line, "--knob")
    return chosen.resolve(scenario.max_connections)


def plan_run(
    scenario: Scenario,
    models: list[Model],
    defaults: Knobs,
    out: Path,
    *,
    command_line_knobs: dict[str, Any] | None = None,
    run_dir: Path | None = None,
    new_run: RunDir | None = None,
    **extra: Any,
) -> Plan:
    """The run's plan; a new run directory under `out` (or `new_run`, made by a check before the
    run) unless an existing `run_dir` is resumed."""
    knobs = resolve_knobs(defaults, scenario, command_line_knobs or {})
    run = RunDir.existing(run_dir) if run_dir else new_run or RunDir.create(out, scenario.name)
    return Plan(scenario, tuple(models), knobs, run, **extra)
