"""The README's promises that are not figures hold: the models its intro names are the ones the
quick answer picks from, `lab ui` starts every one of them, the Docker lines are complete, and
`standard`'s time is what its scenario adds up to at the quick run's measured pace.

Each reads its facts from where they live (the committed quick run, the scenarios, compose.yaml,
the `lab ui` command), so no list of models or variables is typed twice.
"""

from __future__ import annotations

import re

import click
import yaml

from analysis.docfigures import load_summary
from lab.cli.ui import ui
from lab.config.scenario import Scenario, load_scenario
from tests.docscan import ROOT

README = (ROOT / "README.md").read_text()
QUICK_RUN = load_summary("docs/figures/quick.json", ROOT)  # the run the README's answer is from


def test_lab_ui_starts_every_model_the_quick_answer_can_recommend() -> None:
    """The answer recommends one of the run's models (as is, or as an async port): the web UI's
    default must let you look at whichever it names."""
    (models,) = [p for p in ui.params if isinstance(p, click.Option) and p.name == "models"]
    started = set(str(models.default).split(","))
    missing = sorted({*QUICK_RUN["models"], *load_scenario("quick").models} - started)
    assert not missing, f"lab ui's default models leave out {missing}"


def test_the_readme_intro_names_every_model_the_quick_answer_picks_from() -> None:
    intro = README.split("\n## ")[0]
    missing = [m for m in QUICK_RUN["models"] if f"`{m}`" not in intro]
    assert not missing, f"the README's intro does not name {missing}"


def test_the_readme_docker_lines_make_results_and_export_the_user_compose_runs_as() -> None:
    """docs/docker-and-webui.md: saving into ./results needs the folder and LAB_UID/LAB_GID."""
    services = yaml.safe_load((ROOT / "compose.yaml").read_text())["services"]
    wanted = {
        v for s in services.values() for v in re.findall(r"\$\{(\w+)", str(s.get("user", "")))
    }
    assert wanted, "compose.yaml runs no service as a user from the environment"
    blocks = re.findall(r"```sh\n(.*?)```", README, re.S)
    (block,) = [b for b in blocks if "docker compose up" in b]
    before = block.split("docker compose up")[0]
    assert "mkdir -p results" in before
    missing = [v for v in sorted(wanted) if not re.search(rf"\bexport\b.*\b{v}=\$\(id", before)]
    assert not missing, f"the README's Docker lines do not export {missing}"


def minutes(s: Scenario, start_s: float) -> float:
    """A run's length: each model in each trial starts (`start_s`: start-up, verification,
    probe), warms up, then measures every point, each after its settle time."""
    starts = len(s.models) * s.trials
    steps = starts * len(s.points())
    return (starts * (start_s + s.warmup_s + s.settle_s) + steps * (s.duration_s + s.settle_s)) / 60


def test_standard_takes_about_an_hour_at_the_quick_runs_pace() -> None:
    """The README says `standard` takes about an hour: its models x trials starts and models x
    levels x trials steps, at what a start cost in the committed quick run (its wall time less
    its warm-ups and steps)."""
    quick, standard = load_scenario("quick"), load_scenario("standard")
    starts = len(quick.models) * quick.trials
    start_s = (QUICK_RUN["wall_s"] - minutes(quick, 0.0) * 60) / starts
    assert 0 < start_s < 30, f"the quick run's start-ups took {start_s:.1f} s each"
    assert 45 <= minutes(standard, start_s) <= 75, f"standard: {minutes(standard, start_s):.0f} min"
    (line,) = [line for line in README.splitlines() if "lab run --scenario standard" in line]
    assert "about an hour" in line
