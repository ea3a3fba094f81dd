"""`lab report DIR` and `lab compare RUN_A RUN_B`, added to the `lab` group by lab/cli/main.py.

Bad input (a missing directory, no steps.jsonl, an unreadable manifest) is a click error with a
non-zero exit, never a traceback.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from lab.record.errors import LabError, NoAnswer, Refused

if TYPE_CHECKING:
    from analysis.loading import Run

# pandas and matplotlib take seconds to import, so the analysis modules are imported by the
# commands that use them, never when `lab` starts.


def _load(path: Path) -> Run:
    from analysis.loading import RunError, load

    try:
        run = load(path)
    except RunError as exc:  # a damaged or foreign directory is a usage error: exit 2
        raise click.UsageError(str(exc)) from None
    for problem in run.problems:  # what could not be read is named, never skipped in silence
        click.secho(f"warning: {path}: {problem}", fg="yellow", err=True)
    return run


@click.command("report")
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option(
    "--level",
    type=int,
    default=None,
    help="Level of the percentile-spectrum plot: users (closed loop) or rate (open loop) "
    "[default: the highest level every model has].",
)
def report(run_dir: Path, level: int | None) -> None:
    """Print the summary table of RUN_DIR and write its self-contained report.html."""
    run = _load(run_dir)
    from analysis.claims import claims
    from analysis.metrics import export_summary, point_table
    from analysis.report import write_report
    from analysis.summary import print_summary

    table = point_table(run)  # one pass: the points, then the claims both renderings show
    levels = sorted({int(c) for c in table["concurrency"]}) if not table.empty else []
    if level is not None and level not in levels:  # never a spectrum of nothing, in silence
        have = ", ".join(map(str, levels)) or "none measured"
        raise LabError(f"--level {level}: {run_dir} has no such level (its levels: {have})")
    said = claims(run, table) if not table.empty else None
    print_summary(run, table=table, said=said)
    try:
        export_summary(run, table)
        path = write_report(run, level=level, table=table, said=said)
    except OSError as exc:  # the machine's state, not the arguments: exit 3
        raise Refused(f"cannot write the report into {run_dir}: {exc.strerror or exc}") from None
    click.echo(f"report: {path}")


@click.command("compare")
@click.argument("run_a", type=click.Path(path_type=Path))
@click.argument("run_b", type=click.Path(path_type=Path))
def compare_runs(run_a: Path, run_b: Path) -> None:
    """Show per model and level how RUN_B differs from RUN_A, and whether the change is real
    (docs/statistics.md: with one trial, the lab's run-to-run floor; p99 only where 10 requests lie
    beyond it). Runs of different scenarios say so first. Exit code 0: nothing changed; 1: no
    point was measured in both, nothing was compared; 6: a point changed; 7: the runs differ in
    scenario."""
    a, b = _load(run_a), _load(run_b)
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
