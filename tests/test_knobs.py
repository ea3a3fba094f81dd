"""Knob precedence: the command line beats the scenario file, which beats the model defaults.

Checked on a real run: uWSGI's thread count decides how many requests reach the upstream at
once, so the in-flight high-water mark at 6 users shows which `concurrency` value the server was
really started with, besides the command line recorded in the manifest.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from lab.record.rundir import RunDir
from tests.helpers import lab_cli

SCENARIO = """\
models = ["uwsgi-threads"]
levels = [6]
duration_s = 1.5
warmup_s = 0
settle_s = 0.5
probe_k = 2
pin_cpus = false
[upstream]
delay_ms = 100
{knobs}
"""


@pytest.mark.parametrize(
    ("scenario_knobs", "command_line", "threads"),
    [
        ("", (), 6),  # default: "auto" = the run's top level
        ("[knobs]\nconcurrency = 4", (), 4),  # the scenario beats the default
        ("[knobs]\nconcurrency = 4", ("--knob", "concurrency=2"), 2),  # the command line: both
        ("[knobs]\nconcurrency = 4", ("--knob", "workers=2"), 2),  # under its old name too
    ],
    ids=["default", "scenario-over-default", "command-line-over-scenario", "old-name"],
)
def test_command_line_beats_scenario_beats_defaults(
    tmp_path: Path, scenario_knobs: str, command_line: tuple[str, ...], threads: int
) -> None:
    scenario = tmp_path / "knobs.toml"
    scenario.write_text(SCENARIO.format(knobs=scenario_knobs))
    out = tmp_path / "out"
    done = subprocess.run(
        lab_cli("run", "--scenario", str(scenario), "--out", str(out), *command_line),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (path,) = out.iterdir()
    run = RunDir(path)
    argv = run.manifest()["models"]["uwsgi-threads"]["argv"]
    assert argv[argv.index("--threads") + 1] == str(threads)
    (step,) = run.steps()
    assert step.load.upstream_max_inflight == threads  # what the running server really held
