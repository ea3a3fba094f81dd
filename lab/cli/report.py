"""`lab report DIR`: the summary table and report.html of a run; and reading a run for a command
(`load_run`, which `lab compare` shares).

Bad input (a missing directory, no steps.jsonl, an unreadable manifest) is a click error with a
non-zero exit, never a traceback.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from lab.record.errors import LabError, Refused

if TYPE_CHECKING:
    from analysis.loading import Run

# pandas and matplotlib take seconds to import, so the analysis modules are imported by the
# commands that use them, never when `lab` starts.


def load_run(path: Path) -> Run:
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
    run = load_run(run_dir)
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
