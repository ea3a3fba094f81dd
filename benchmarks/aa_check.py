"""Benchmark (not a test): an A/A test of the lab's claims. Do two runs of the same code call
each other changed?

Runs the same `lab run` twice, back to back on this machine, then compares the two as `lab
compare` does and lists each run's crossovers beyond noise (`analysis.metrics.crossovers`). Any
"changed" between them is a false claim, and so is a crossover of one run that the other run
reverses. The target (issue 33): at most 5% of the points called changed, and every beyond-noise
crossover of one run holding (the same order at that level) in the other. The table shows the
count with the intervals of each step's own seconds only, beside the lab's intervals (the same
seconds widened by the committed run-to-run floor, `lab/verdict/noise.toml`), so the floor's share
is measured side by side.

`--calibrate` writes this pair's run-to-run floor into lab/verdict/noise.toml (the relative
spread of its fair points, `lab.verdict.difference.calibrate`, with the two run ids): calibrate on
one pair, then check on another, or the check grades its own answer. `--runs A B` analyses two
existing runs instead of running them. A full `quick` run takes about 4.5 minutes on 2 cores;
`--models`, `--levels` and `--duration` make a shorter one (the table's source line says which).

Usage: .venv/bin/python benchmarks/aa_check.py [--scenario quick] [--models M,M] [--levels 1,50]
       [--duration S] [--out results/aa-check] [--runs A B] [--calibrate]
       [--summary docs/figures/bench-aa-check.json]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
from rich.console import Console
from rich.table import Table

from analysis.compare import compare
from analysis.loading import Run, load
from analysis.metrics import crossovers, point_table
from benchmarks.figures import write_summary
from lab.system import environment
from lab.verdict.difference import (
    CALIBRATION,
    FLAGGED,
    NO_FLOOR,
    TOO_FEW,
    Floor,
    calibrate,
    floor,
)

TARGET_CHANGED = 0.05  # at most this share of the points called changed
HEADERS = [
    "intervals",
    "points",
    "rps changed",
    "p99 changed",
    "not a fair result",
    "p99 not compared",
    "crossovers beyond noise (A / B)",
    "held in the other run",
]


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scenario", default="quick")
    p.add_argument("--models", help="comma-separated models (default: the scenario's)")
    p.add_argument("--levels", help="comma-separated levels (default: the scenario's)")
    p.add_argument("--duration", type=float, help="seconds per level (default: the scenario's)")
    p.add_argument("--out", type=Path, default=Path("results/aa-check"))
    p.add_argument("--runs", nargs=2, type=Path, help="analyse these two runs, run nothing")
    p.add_argument("--calibrate", action="store_true", help="write this pair's floor")
    p.add_argument("--summary", type=Path, help="write the table as a docs figure summary")
    return p.parse_args()


def sweep(args: argparse.Namespace) -> Path:
    """One `lab run` into a fresh directory under --out; returns the run directory."""
    out = args.out / time.strftime("%Y%m%d-%H%M%S")
    argv = [sys.executable, "-c", "from lab.cli.main import entry; entry()", "run"]
    argv += ["--scenario", args.scenario, "--out", str(out)]
    for flag, value in (("--models", args.models), ("--levels", args.levels)):
        argv += [flag, value] if value else []
    argv += ["--duration", str(args.duration)] if args.duration else []
    subprocess.run(argv, check=False, stdout=subprocess.DEVNULL, timeout=3600)
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    return run_dir


def held(cross: pd.DataFrame, other: pd.DataFrame) -> tuple[int, int]:
    """Of `cross`'s crossovers beyond noise, how many keep their order at that level in the run
    `other` (its point table): (held, clear)."""
    clear = cross[cross["clear"]]
    table = other.set_index(["mode", "concurrency", "model"])
    kept = 0
    for r in clear.itertuples():
        try:
            win = table.loc[(r.mode, r.concurrency, r.overtaker), r.metric]
            lose = table.loc[(r.mode, r.concurrency, r.overtaken), r.metric]
        except KeyError:
            continue
        kept += bool(win > lose if r.metric == "rps" else win < lose)
    return kept, len(clear)


def row(name: str, frame: pd.DataFrame, crossing: str, holding: str) -> list[str]:
    n = len(frame)
    return [
        name,
        str(n),
        f"{int(frame['rps_significant'].sum())} of {n}",
        f"{int(frame['p99_significant'].sum())} of {n}",
        f"{int((frame['rps_basis'] == FLAGGED).sum())} of {n}",
        f"{int((frame['p99_basis'] == TOO_FEW).sum())} of {n}",
        crossing,
        holding,
    ]


def rows(a: Run, b: Run, noise: Floor) -> list[list[str]]:
    """Seconds only, then the lab's intervals (its floor): changed points and crossovers."""
    ta, tb = point_table(a), point_table(b)
    ca, cb = crossovers(ta, a.records), crossovers(tb, b.records)
    (ha, na), (hb, nb) = held(ca, tb), held(cb, ta)
    lab = row("seconds + run-to-run floor", compare(a, b, noise), f"{na} / {nb}", "")
    lab[-1] = f"{ha} of {na} / {hb} of {nb}"
    return [row("each step's seconds only", compare(a, b, NO_FLOOR), "-", "-"), lab]


def write_floor(a: Run, b: Run) -> Floor:
    """The pair's run-to-run floor, over the points fair in both runs, into the calibration."""
    frame = compare(a, b, NO_FLOOR)
    fair = frame["rps_basis"] != FLAGGED
    p99 = fair & (frame["p99_basis"] != TOO_FEW)
    env = environment.capture()
    noise = Floor(
        rps_sd=round(calibrate(frame.loc[fair, "rps_change"].tolist()), 4),
        p99_sd=round(calibrate(frame.loc[p99, "p99_change"].tolist()), 4),
        points=int(p99.sum()),  # the fewer: the p99's
        runs=(a.run_dir.name, b.run_dir.name),
        machine=f"{env['cpus']} CPUs ({env['cpu_model']})",
    )
    lines = CALIBRATION.read_text().splitlines()
    head = [line for line in lines if line.startswith("#")]
    runs = ", ".join(f'"{r}"' for r in noise.runs)
    CALIBRATION.write_text(
        "\n".join(head)
        + f"\nrps_sd = {noise.rps_sd}\np99_sd = {noise.p99_sd}\npoints = {noise.points}\n"
        + f'runs = [{runs}]\nmachine = "{noise.machine}"\n'
    )
    return noise


def main() -> None:
    args = parse_args()
    started = time.time()
    dirs = args.runs or [sweep(args), sweep(args)]
    a, b = load(dirs[0]), load(dirs[1])
    noise = write_floor(a, b) if args.calibrate else floor()
    body = rows(a, b, noise)
    console = Console()
    out = Table(title=f"A/A: {b.run_dir.name} against {a.run_dir.name}", header_style="bold")
    for header in HEADERS:
        out.add_column(header, justify="left" if header == "intervals" else "right")
    for r in body:
        out.add_row(*r)
    console.print(out)
    console.print(noise.words(), highlight=False)
    points, called = int(body[1][1]), max(int(body[1][i].split()[0]) for i in (2, 3))
    held_all = [int(x.split()[0]) == int(x.split()[2]) for x in body[1][-1].split(" / ")]
    met = called <= TARGET_CHANGED * points and all(held_all)
    console.print(
        f"target {'met' if met else 'NOT met'}: at most {TARGET_CHANGED:.0%} of the points "
        f"changed (here {called} of {points}) and every crossover beyond noise held in the "
        "other run",
        highlight=False,
    )
    if args.summary:
        kept = f"the script's printed table, runs {a.run_dir.name} and {b.run_dir.name}"
        write_summary(args.summary, "aa-check", HEADERS, body, kept, started)


if __name__ == "__main__":
    main()
