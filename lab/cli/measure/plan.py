"""`lab plan --detect 10%`: how long a run must be to see a given change, before running it.

Why a command of its own: a difference under a run's noise is never called, so the length (the
trials and seconds per step) decides what a comparison can see; the plan reads the committed
run-to-run floor, or a run's own trials' spread (`--from`), through `lab.verdict.power`.
"""

from __future__ import annotations

import math

import click

from lab.record.errors import LabError
from lab.record.step import StepRecord
from lab.verdict.difference import points as points_of
from lab.verdict.power import floor_spread, plan_words, run_spread
from lab.verdict.power import plan as plan_length


@click.command("plan")
@click.option(
    "--detect",
    required=True,
    metavar="PERCENT",
    help="The throughput or p99 change to see, in percent from 1% to 100% (10 and 10% both "
    "mean 10%; 0.1 is refused, not read as 10%): the trials and seconds per step it takes to "
    "call it apart with 80% power.",
)
@click.option(
    "--from",
    "from_run",
    type=click.Path(exists=True, file_okay=False),
    default=None,
    help="A run directory whose own trials' spread to plan from [default: the committed floor].",
)
@click.option(
    "--points",
    type=click.IntRange(min=1),
    default=None,
    help="The points compared together (`lab compare` corrects for their number, BH) "
    "[default: the --from run's, else 1].",
)
def plan_command(detect: str, from_run: str | None, points: int | None) -> None:
    """Say how long a run must be to see a given change (`lab.verdict.power`)."""
    change = detect_share(detect)
    records: list[StepRecord] = []
    if from_run is not None:
        from analysis.loading import RunError, load  # pandas: only for a run's records

        try:
            records = list(load(from_run).records)
        except RunError as e:
            raise LabError(f"--from {from_run}: {e}") from None
    family = points or len(points_of(records)) or 1
    for metric in ("rps", "p99"):
        spread = run_spread(records, metric) if records else floor_spread(metric)
        said = plan_words(plan_length(change, spread, family=family), spread)
        click.echo(said)  # the result: stdout


def detect_share(text: str) -> float:
    """'10%' (or '10') as 0.10; a one-line error for anything else. Why 1% to 100%: below 1% a
    share (0.1 for 10%) is the likelier meaning than a change no run length sees, and above 100%
    the shortest run sees it already (a 999% change planned the same as 100%)."""
    try:
        share = float(text.strip().removesuffix("%")) / 100
    except ValueError:
        share = math.nan
    if not 0.01 <= share <= 1:
        raise LabError(
            f"--detect takes a change in percent from 1% to 100%, like 10%, not {text!r} "
            "(a share such as 0.1 is not read as 10%)"
        )
    return share
