"""Benchmark (not a test): hold `lab plan` against A/B runs made for it.

For each delay change (default 10% and 25%), the run length is planned from the committed floor
(`lab.verdict.power`) for the throughput change the delay makes where a model tracks the ideal
(users / d: 1 - 1 / (1 + change)); A runs at 100 ms and B at 100 x (1 + change) ms with that many
trials and seconds per step (`aa_check.sweep`), and of the points fair in both runs that tracked
the ideal in A, the table counts how many the lab called changed, on throughput and on p99
(`aa_check.power_row`). The target: at least 80% on throughput, and on p99 wherever the plan says
the p99 change is seen (a p99 change under the instrument's 15% never is).

Each pair is two `lab run`s of the planned length: at 4 trials of 5 s over `quick`'s levels and
models, about 20 minutes a run; `--models` and `--levels` make it shorter (the table's source
line says which).

Usage: .venv/bin/python benchmarks/plan_check.py [--changes 10 25] [--models M,M] [--levels 1,10]
       [--out results/plan-check] [--summary docs/figures/bench-plan-check.json]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from analysis.loading import load
from benchmarks.aa_check import POWER_HEADERS, power_row, sweep
from benchmarks.figures import print_table, write_summary
from lab.verdict.power import floor_spread, plan

BASE_MS = 100.0
HEADERS = ["delay change", "planned: rps / p99", *POWER_HEADERS[1:6]]


def planned(change: float) -> tuple[int, float, str]:
    """The run length for the throughput change a delay change makes, and both plans in words."""
    rps = plan(1 - 1 / (1 + change), floor_spread("rps"))
    p99 = plan(change, floor_spread("p99"))
    said = [f"{p.trials} x {p.seconds:g} s" if p.trials else "not seen" for p in (rps, p99)]
    trials = max(rps.trials, p99.trials) if p99.trials else rps.trials
    seconds = max(rps.seconds, p99.seconds) if p99.trials else rps.seconds
    return max(trials, 1), seconds, " / ".join(said)


def pair(args: argparse.Namespace, change: float) -> list[str]:
    trials, seconds, said = planned(change)
    run = argparse.Namespace(**{**vars(args), "trials": trials, "duration": seconds})
    run.out = args.out / f"{change:.0%}".rstrip("%")
    a = load(sweep(run, BASE_MS))
    b = load(sweep(run, BASE_MS * (1 + change)))
    return [f"+{change:.0%}", said, *power_row(a, b)[1:6]]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--changes", nargs="+", type=float, default=[10.0, 25.0])
    p.add_argument("--scenario", default="quick")
    p.add_argument("--models", help="comma-separated models (default: the scenario's)")
    p.add_argument("--levels", help="comma-separated levels (default: the scenario's)")
    p.add_argument("--out", type=Path, default=Path("results/plan-check"))
    p.add_argument("--summary", type=Path, help="write the table as a docs figure summary")
    args = p.parse_args()
    started = time.time()
    body = [pair(args, c / 100) for c in args.changes]
    print_table("A/B runs at the planned length", HEADERS, body)
    if args.summary:
        write_summary(args.summary, "plan-check", HEADERS, body, "the script's table", started)


if __name__ == "__main__":
    main()
