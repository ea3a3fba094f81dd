"""Benchmark (not a test): do identical runs give the same answer, on a quiet or a busy machine?

Runs `lab run` N times back to back (or reads existing runs with `--runs`) and reads each run's
answer for the user's app the way the summary prints it (`analysis.interfaces`): the model
recommended as it is (with the models tied with it) and its level, and the port's verdict on
throughput (its direction, or "no measurable difference"). The target (issue 53): the same as-is
answer (the same model, or tie sets that share it) and the same port verdict in at least 9 of 10
quiet runs; on a busy machine (`--busy`: a background process busy 50 ms of every 100 ms, not
pinned, for the whole run) the quiet runs' answer or "too busy to tell", never an answer at a
level where the lab excluded a candidate (the answer's level rule makes that impossible: the
table shows the level each run answered at, and which heavier levels it left out and why).

Usage: .venv/bin/python benchmarks/answer_check.py [--runs-n 10] [--busy] [--models M,M]
       [--levels 1,50] [--duration S] [--out results/answer-check] [--runs R [R ...]]
       [--summary docs/figures/bench-answer-check.json]
"""

from __future__ import annotations

import argparse
import multiprocessing
import multiprocessing.synchronize
import re
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from analysis.interfaces import run_answer
from analysis.loading import Run, load
from benchmarks.aa_check import add_overrides
from benchmarks.figures import print_table, write_summary

TARGET_SAME = 0.9  # at least this share of quiet runs give the most common answer
HEADERS = [
    "run",
    "as it is: best (tied)",
    "at",
    "heavier levels left out",
    "port: throughput",
    "port: change [95% interval]",
]


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs-n", type=int, default=10, help="runs to make (default 10)")
    p.add_argument("--busy", action="store_true", help="a background process busy half a core")
    add_overrides(p, "models", "levels", "duration")
    p.add_argument("--out", type=Path, default=Path("results/answer-check"))
    p.add_argument("--runs", nargs="+", type=Path, help="read these runs, run nothing")
    p.add_argument("--summary", type=Path, help="write the table as a docs figure summary")
    return p.parse_args()


def _half_busy(stop: multiprocessing.synchronize.Event) -> None:
    """Busy 50 ms of every 100 ms until `stop`: half of one core, on whichever core is free."""
    while not stop.is_set():
        until = time.monotonic() + 0.05
        while time.monotonic() < until:
            pass
        time.sleep(0.05)


@contextmanager
def busy(on: bool) -> Iterator[None]:
    """A background process taking half of one core while the block runs (nothing if not `on`)."""
    if not on:
        yield
        return
    stop = multiprocessing.Event()
    proc = multiprocessing.Process(target=_half_busy, args=(stop,), daemon=True)
    proc.start()
    try:
        yield
    finally:
        stop.set()
        proc.join(timeout=5)


def sweep(args: argparse.Namespace) -> Path:
    """One `lab run` into a fresh directory under --out; returns the run directory."""
    out = args.out / time.strftime("%Y%m%d-%H%M%S")
    argv = [sys.executable, "-c", "from lab.cli.main import entry; entry()", "run"]
    argv += ["--out", str(out)]
    for flag, value in (("--models", args.models), ("--levels", args.levels)):
        argv += [flag, value] if value else []
    argv += ["--duration", f"{args.duration:g}"] if args.duration else []
    subprocess.run(argv, check=False, stdout=subprocess.DEVNULL, timeout=3600)
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    return run_dir


def read(run: Run) -> list[str]:
    """One row: the as-is best and its ties, its level, the heavier levels left out, the port."""
    lines = run_answer(run.records, run.manifest, run.points)
    as_is = next((x for x in lines if x.startswith(("for your app as it is", "no model"))), "")
    port = next((x for x in lines if x.startswith("if you port")), "")
    found = re.match(r"for your app as it is, at ([^:]+): ([\w-]+),", as_is)
    tied = re.search(r"\(tied: ([^)]*)\)", as_is.split("; not at ")[0])
    # "(tied: a, b: tied on throughput; p99 1.5x worse, apart beyond noise)": names end at ":"
    ties = [t.strip() for t in tied[1].split(":")[0].split(", ")] if tied else []
    names = [found[2], *ties] if found else []
    left = re.findall(r"at ([\d,.]+ (?:users?|req/s)) the lab's own limits", as_is)
    return [
        run.run_dir.name,
        " = ".join(names) if names else "too busy to tell",
        found[1] if found else "-",
        ", ".join(left) or "none",
        _port(port),
        m[1] if (m := re.search(r"throughput \(?([+-]\d+% \[[^\]]*\])", port)) else "-",
    ]


def _port(line: str) -> str:
    if "no measurable difference in throughput" in line:
        return "no measurable difference"
    if (m := re.search(r": throughput ([+-]\d+%)", line)) is not None:
        return "faster" if m[1].startswith("+") else "slower"
    return "not compared"


def same(rows: list[list[str]]) -> tuple[str, int]:
    """The most common (as-is answer, port verdict), counting tie sets that share a model as
    the same answer, and how many runs gave it."""
    counts: Counter[tuple[str, str]] = Counter()
    for r in rows:
        for name in r[1].split(" = "):
            counts[(name, r[4])] += 1
    (name, port), n = counts.most_common(1)[0]
    return f"{name}; port {port}", n


def main() -> None:
    args = parse_args()
    started = time.time()
    with busy(args.busy):
        dirs = args.runs or [sweep(args) for _ in range(args.runs_n)]
    rows = [read(load(d)) for d in dirs]
    answer, n = same(rows)
    verdict = "met" if n >= TARGET_SAME * len(rows) else "NOT met"
    title = f"the same answer ({answer}) in {n} of {len(rows)} runs: target {verdict}"
    print_table(title, HEADERS, rows)
    if args.summary:
        kept = f"{'busy (half a core taken)' if args.busy else 'quiet'}; {title}"
        write_summary(args.summary, "answer-check", HEADERS, rows, kept, started)


if __name__ == "__main__":
    main()
