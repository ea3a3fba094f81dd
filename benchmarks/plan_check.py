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
       .venv/bin/python benchmarks/plan_check.py --runs A B [--summary F]: an earlier pair's
       p99 per point (A's and B's, the change and its interval, called or not), no new runs
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace
from pathlib import Path

from analysis.compare import compare
from analysis.loading import Run, load
from benchmarks.aa_check import POWER_HEADERS, add_overrides, power_row, sweep
from benchmarks.figures import print_table, write_summary
from lab.config.scenario import load_scenario
from lab.record.thresholds import T
from lab.verdict.difference import FLAGGED, MIN_BEYOND, TOO_FEW, beyond
from lab.verdict.power import floor_spread, plan

BASE_MS = 100.0
HEADERS = ["delay change", "planned: rps / p99", *POWER_HEADERS[1:6]]
POINTS = ["model", "users", "p99 A", "p99 B", "p99 change [95%]", "p", "called changed (BH)"]


def planned(change: float, least_users: int, family: int) -> tuple[int, float, str]:
    """The run length for the throughput change a delay change makes and for the p99 change,
    and both plans in words. The p99's step is long enough that B's slowest point (the fewest
    users, at the least share of the ideal that still tracks it) answers the thousand a p99
    needs, as `lab plan --from` lengthens it from a run; both for a change at any one of the
    `family` points `lab compare` tests together (`lab plan --points`)."""
    rps = plan(1 - 1 / (1 + change), floor_spread("rps"), family=family)
    slowest = T.tracks_ideal_share * least_users * 1000 / (BASE_MS * (1 + change))
    enough = replace(floor_spread("p99"), least_s=MIN_BEYOND / beyond(slowest))
    p99 = plan(change, enough, family=family)
    said = [f"{p.trials} x {p.seconds:g} s" if p.trials else "not seen" for p in (rps, p99)]
    trials = max(rps.trials, p99.trials) if p99.trials else rps.trials
    seconds = max(rps.seconds, p99.seconds) if p99.trials else rps.seconds
    return max(trials, 1), seconds, " / ".join(said)


def point_rows(a: Run, b: Run) -> list[list[str]]:
    """Each point's p99 in A and B, its change with its own 95% interval, and whether `lab
    compare` called it changed once corrected (Benjamini-Hochberg) over the p99s it tested
    together; printed."""
    frame = compare(a, b)
    rows = []
    for r in frame.to_dict("records"):
        tested = r["p99_basis"] not in (TOO_FEW, FLAGGED)
        change = f"{r['p99_change']:+.1%}"
        change += f" [{r['p99_ci_lo']:+.1%}, {r['p99_ci_hi']:+.1%}]" if tested else ""
        called = ("yes" if r["p99_significant"] else "no") if tested else r["p99_basis"]
        p = f"{r['p99_p']:.3f}" if tested else "-"
        figures = [f"{r['p99_a']:.1f} ms", f"{r['p99_b']:.1f} ms", change, p]
        rows.append([str(r["model"]), str(r["concurrency"]), *figures, called])
    print_table(f"p99 per point, {b.run_dir.name} against {a.run_dir.name}", POINTS, rows)
    return rows


def pair(args: argparse.Namespace, change: float) -> list[str]:
    scenario = load_scenario(args.scenario)
    levels = [int(n) for n in args.levels.split(",")] if args.levels else scenario.levels
    models = args.models.split(",") if args.models else scenario.models
    trials, seconds, said = planned(change, min(levels), len(models) * len(levels))
    run = argparse.Namespace(**{**vars(args), "trials": trials, "duration": seconds})
    run.out = args.out / f"{change:.0%}".rstrip("%")
    a = load(sweep(run, BASE_MS))
    b = load(sweep(run, BASE_MS * (1 + change)))
    point_rows(a, b)  # printed
    return [f"+{change:.0%}", said, *power_row(a, b)[1:6]]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--changes", nargs="+", type=float, default=[10.0, 25.0])
    p.add_argument("--scenario", default="quick")
    add_overrides(p, "models", "levels")
    p.add_argument("--out", type=Path, default=Path("results/plan-check"))
    p.add_argument("--summary", type=Path, help="write the table as a docs figure summary")
    p.add_argument("--runs", nargs=2, type=Path, help="an earlier pair: its p99 per point only")
    args = p.parse_args()
    started = time.time()
    if args.runs:  # no new runs: the p99 per point of a pair already made
        a, b = (load(d) for d in args.runs)
        rows = point_rows(a, b)
        if args.summary:
            kept = f"the script's table, runs {a.run_dir.name} and {b.run_dir.name}"
            write_summary(args.summary, "plan-check-points", POINTS, rows, kept, started)
        return
    body = [pair(args, c / 100) for c in args.changes]
    print_table("A/B runs at the planned length", HEADERS, body)
    if args.summary:
        write_summary(args.summary, "plan-check", HEADERS, body, "the script's table", started)


if __name__ == "__main__":
    main()
