"""Benchmark (not a test): an A/A test of the lab's claims. Do two runs of the same code call
each other changed?

Runs the same `lab run` twice, back to back on this machine, then compares the two as `lab
compare` does and lists each run's crossovers beyond noise (`analysis.differences.crossovers`). Any
"changed" between them is a false claim, and so is a crossover of one run that the other run
reverses. The target (issue 33): at most 5% of the points called changed, and every beyond-noise
crossover of one run holding (the same order at that level) in the other. The table shows the
count with the intervals of each step's own seconds only, beside the lab's intervals (the same
seconds widened by the committed run-to-run floor, `lab/verdict/noise.toml`), so the floor's share
is measured side by side.

Many pairs (issue 46): `--pairs N` runs N A/A pairs (or `--runs` takes 2N existing runs, in pair
order) and prints one row per pair: the points changed out of those tested (a point flagged, or a
p99 with too few requests beyond it, is not tested), and the crossovers each run claims beyond
noise, Benjamini-Hochberg-corrected over its flips. The target: at most one pair claims any
crossover, or more than 1 of its 35 points changed on either metric.

`--calibrate` writes this pair's run-to-run floor into lab/verdict/noise.toml (the relative
spread of its fair points, `lab.verdict.difference.calibrate`, with the two run ids): calibrate on
one pair, then check on another, or the check grades its own answer. `--runs A B` analyses two
existing runs instead of running them. A full `quick` run takes about 4.5 minutes on 2 cores;
`--models`, `--levels` and `--duration` make a shorter one (the table's source line says which).

Power beside it (`--delays 100 125`): an A/B test, where the truth differs. Run A at upstream
delay 100 ms and B at 125 ms: where a model tracks the ideal (users / d) in A, its throughput
truly falls by a fifth in B, so the lab must call it changed there (the target: at least 80% of
those points); with `--trials 3` a smaller step (100 vs 110 ms) must be seen. The table also gives
the smallest difference the one test of difference calls apart with that many trials
(`lab.verdict.difference.smallest`), for throughput and p99.

Usage: .venv/bin/python benchmarks/aa_check.py [--scenario quick] [--models M,M] [--levels 1,50]
       [--duration S] [--trials N] [--out results/aa-check] [--runs A B [C D ...]] [--calibrate]
       [--delays DA DB] [--pairs N] [--summary docs/figures/bench-aa-check.json]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pandas as pd
from rich.console import Console
from rich.table import Table

from analysis.compare import compare
from analysis.differences import crossovers
from analysis.loading import POINT, Run, load
from analysis.metrics import point_table
from benchmarks.figures import print_table, write_summary
from lab.record.thresholds import T
from lab.system import environment
from lab.verdict.difference import (
    CALIBRATION,
    FLAGGED,
    NO_FLOOR,
    TOO_FEW,
    Floor,
    calibrate,
    floor,
    smallest,
)

TARGET_CHANGED = 0.05  # A/A: at most this share of the points called changed
TARGET_SEEN = 0.80  # A/B: at least this share of the points tracking the ideal called changed
# Many A/A pairs: at most PAIRS_CLAIMING pairs may claim something false, where a false claim is a
# crossover beyond noise its partner run does not hold, or more than POINTS_CHANGED points called
# changed. A crossover both runs hold is the models' own (they do cross between levels): under A/A
# it is the same claim twice, not a false one.
PAIRS_CLAIMING = 1
POINTS_CHANGED = 1
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


# What a benchmark that runs `lab run` may override in its scenario, worded once for all of them
# (this one, benchmarks/answer_check.py, benchmarks/plan_check.py).
OVERRIDES: dict[str, dict[str, Any]] = {
    "models": {"help": "comma-separated models (default: the scenario's)"},
    "levels": {"help": "comma-separated levels (default: the scenario's)"},
    "duration": {"type": float, "help": "seconds per level (default: the scenario's)"},
}


def add_overrides(p: argparse.ArgumentParser, *names: str) -> None:
    """--models, --levels, --duration (those named), each the scenario's unless given."""
    for name in names:
        p.add_argument(f"--{name}", **OVERRIDES[name])


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scenario", default="quick")
    add_overrides(p, "models", "levels", "duration")
    p.add_argument("--trials", type=int, help="trials per point (default: the scenario's)")
    p.add_argument("--delays", nargs=2, type=float, help="A/B: run A and B at these delays (ms)")
    p.add_argument("--out", type=Path, default=Path("results/aa-check"))
    p.add_argument("--runs", nargs="+", type=Path, help="analyse these runs (pairs), run nothing")
    p.add_argument("--pairs", type=int, help="run this many A/A pairs, one row per pair")
    p.add_argument("--calibrate", action="store_true", help="write this pair's floor")
    p.add_argument("--summary", type=Path, help="write the table as a docs figure summary")
    return p.parse_args()


def sweep(args: argparse.Namespace, delay_ms: float | None = None) -> Path:
    """One `lab run` into a fresh directory under --out; returns the run directory."""
    out = args.out / time.strftime("%Y%m%d-%H%M%S")
    argv = [sys.executable, "-c", "from lab.cli.main import entry; entry()", "run"]
    argv += ["--scenario", args.scenario, "--out", str(out)]
    for flag, value in (("--models", args.models), ("--levels", args.levels)):
        argv += [flag, value] if value else []
    for flag, number in (("--duration", args.duration), ("--trials", args.trials)):
        argv += [flag, f"{number:g}"] if number else []
    argv += ["--delay-ms", f"{delay_ms:g}"] if delay_ms else []
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


def tested(frame: pd.DataFrame, metric: str) -> pd.Series:
    """The points whose `metric` the test compared (not flagged; a p99 with enough beyond it)."""
    return ~frame[f"{metric}_basis"].isin((FLAGGED, TOO_FEW))


def changed(frame: pd.DataFrame, metric: str) -> str:
    """ "x of n": the points called changed on `metric`, out of those tested."""
    return f"{int(frame[f'{metric}_significant'].sum())} of {int(tested(frame, metric).sum())}"


def row(name: str, frame: pd.DataFrame, crossing: str, holding: str) -> list[str]:
    n = len(frame)
    return [
        name,
        str(n),
        changed(frame, "rps"),
        changed(frame, "p99"),
        f"{int((frame['rps_basis'] == FLAGGED).sum())} of {n}",
        f"{int((frame['p99_basis'] == TOO_FEW).sum())} of {n}",
        crossing,
        holding,
    ]


def rows(a: Run, b: Run, noise: Floor) -> list[list[str]]:
    """Seconds only, then the lab's intervals (its floor): changed points and crossovers."""
    ta, tb = point_table(a), point_table(b)
    ca, cb = crossovers(ta, a.points), crossovers(tb, b.points)
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


PAIR_HEADERS = [
    "pair",
    "points",
    "rps changed (of tested)",
    "p99 changed (of tested)",
    "crossovers beyond noise (A / B, of flips tested)",
    "held in the partner run (A / B)",
    "claims something false",
]


def pair_row(number: int, a: Run, b: Run) -> list[str]:
    """One A/A pair: the points changed out of those tested, each run's crossovers beyond noise
    and how many its partner holds, and whether the pair claims something false (a crossover
    the partner does not hold, or more than POINTS_CHANGED points changed)."""
    frame = compare(a, b)
    tables = [point_table(r) for r in (a, b)]
    cross = [crossovers(t, r.points) for t, r in zip(tables, (a, b), strict=True)]
    flips = [int(c["p"].notna().sum()) if not c.empty else 0 for c in cross]
    kept = [held(cross[0], tables[1]), held(cross[1], tables[0])]  # (held, clear) each
    most = max(int(frame[f"{m}_significant"].sum()) for m in ("rps", "p99"))
    claims = any(h < c for h, c in kept) or most > POINTS_CHANGED
    return [
        f"{number}: {a.run_dir.name} / {b.run_dir.name}",
        str(len(frame)),
        changed(frame, "rps"),
        changed(frame, "p99"),
        f"{kept[0][1]} of {flips[0]} / {kept[1][1]} of {flips[1]}",
        f"{kept[0][0]} of {kept[0][1]} / {kept[1][0]} of {kept[1][1]}",
        "yes" if claims else "no",
    ]


def pairs(args: argparse.Namespace, started: float) -> None:
    """Many A/A pairs (given as 2N runs, or run here): a row each, and the target."""
    dirs = args.runs or [sweep(args) for _ in range(2 * args.pairs)]
    if len(dirs) % 2:
        sys.exit("aa_check: --runs takes runs in pairs (an even number)")
    runs = [load(d) for d in dirs]
    body = [pair_row(i // 2 + 1, runs[i], runs[i + 1]) for i in range(0, len(runs), 2)]
    print_table(f"A/A: {len(body)} pairs", PAIR_HEADERS, body)
    claiming = sum(r[-1] == "yes" for r in body)
    met = claiming <= PAIRS_CLAIMING
    Console().print(
        f"target {'met' if met else 'NOT met'}: at most {PAIRS_CLAIMING} pair(s) claim something "
        f"false, a crossover beyond noise its partner run does not hold or more than "
        f"{POINTS_CHANGED} point(s) changed (here {claiming} of {len(body)})",
        highlight=False,
    )
    if args.summary:
        kept = "the script's printed table, runs " + ", ".join(r.run_dir.name for r in runs)
        write_summary(args.summary, "aa-pairs", PAIR_HEADERS, body, kept, started)


POWER_HEADERS = [
    "delays A / B",
    "trials",
    "points tracking the ideal in A",
    "rps changed there",
    "p99 changed there (of those tested)",
    "rps changed, all points",
    "smallest difference called apart: rps / p99",
]


def power_row(a: Run, b: Run) -> list[str]:
    """Where the truth differs: of the points fair in both runs whose throughput tracked the
    ideal in A, how many the lab called changed, and the smallest difference it can call. A p99
    refused for too few answers beyond it was not tested, so it counts neither way."""
    frame = compare(a, b)
    ta = point_table(a).set_index(POINT)
    keys = list(zip(*(frame[k] for k in POINT), strict=True))
    tracks = [bool(ta.loc[k, "efficiency"] >= T.tracks_ideal_share) for k in keys]
    seen = frame[pd.Series(tracks, index=frame.index) & (frame["rps_basis"] != FLAGGED)]
    trials = int(ta["trials"].min())
    n = len(seen)
    tested = seen[seen["p99_basis"] != TOO_FEW]
    return [
        f"{a.delay_ms:g} / {b.delay_ms:g} ms",
        str(trials),
        str(n),
        f"{int(seen['rps_significant'].sum())} of {n}",
        f"{int(tested['p99_significant'].sum())} of {len(tested)}",
        f"{int(frame['rps_significant'].sum())} of {len(frame)}",
        f"{smallest('rps', trials):.1%} / {smallest('p99', trials):.1%}",
    ]


def power(args: argparse.Namespace, started: float) -> None:
    """The A/B check: runs at two delays (or two given runs), the table, the target."""
    dirs = args.runs or [sweep(args, args.delays[0]), sweep(args, args.delays[1])]
    a, b = load(dirs[0]), load(dirs[1])
    body = [power_row(a, b)]
    out = Table(title=f"A/B: {b.run_dir.name} against {a.run_dir.name}", header_style="bold")
    for header in POWER_HEADERS:
        out.add_column(header, justify="right")
    out.add_row(*body[0])
    console = Console()
    console.print(out)
    called, n = (int(x) for x in body[0][3].split(" of "))
    met = n > 0 and called >= TARGET_SEEN * n
    console.print(
        f"target {'met' if met else 'NOT met'}: at least {TARGET_SEEN:.0%} of the points that "
        f"track the ideal called changed in throughput (here {called} of {n})",
        highlight=False,
    )
    if args.summary:
        kept = f"the script's printed table, runs {a.run_dir.name} and {b.run_dir.name}"
        write_summary(args.summary, "ab-check", POWER_HEADERS, body, kept, started)


def main() -> None:
    args = parse_args()
    started = time.time()
    if args.delays:
        power(args, started)
        return
    if args.pairs or (args.runs and len(args.runs) > 2):
        pairs(args, started)
        return
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
