"""`lab compare RUN_A RUN_B`: per model and level, how RUN_B differs from RUN_A, and whether the
change is real (the one test of difference, BH over the points compared).

Bad input (a missing directory, no steps.jsonl, an unreadable manifest) is a click error with a
non-zero exit, never a traceback; comparing nothing is no pass (exit 1).
"""

from __future__ import annotations

from pathlib import Path

import click

from lab.cli.report import load_run
from lab.record.errors import NoAnswer

# pandas and matplotlib take seconds to import: the analysis modules are imported when the
# command runs, never when `lab` starts.


@click.command("compare")
@click.argument("run_a", type=click.Path(path_type=Path))
@click.argument("run_b", type=click.Path(path_type=Path))
def compare_runs(run_a: Path, run_b: Path) -> None:
    """Show per model and level how RUN_B differs from RUN_A, and whether the change is real
    (docs/statistics.md: with one trial, the lab's run-to-run floor; p99 only where 10 requests lie
    beyond it). Runs of different scenarios say so first. Exit code 0: nothing changed; 1: no
    point was measured in both, nothing was compared; 6: a point changed; 7: the runs differ in
    scenario."""
    a, b = load_run(run_a), load_run(run_b)
    from analysis.compare import compare, exit_code, print_compare, scenario_differences, unpaired

    frame, differ = compare(a, b), scenario_differences(a, b)
    print_compare(frame, f"{run_b.name} vs {run_a.name}", first=(differ, unpaired(a, b)))
    from analysis.routes import print_route_compare
    from analysis.summary import wide_console

    title = f"per route: {run_b.name} (B) vs {run_a.name} (A)"
    print_route_compare(a, b, title, wide_console())
    from analysis.profiles.flame import moved

    for model, level, said in moved(a.records, b.records):  # where the time went, A -> B
        print(f"profile {model} at {level}: {said}")
    if code := exit_code(frame, differ):
        raise SystemExit(code)
    if frame.empty:  # exit 0 says "nothing changed": a CI gate must not pass on nothing
        raise NoAnswer(
            f"nothing was compared: no model and level was measured in both {run_a} and "
            f"{run_b} (`lab report` on each shows what it measured)"
        )
