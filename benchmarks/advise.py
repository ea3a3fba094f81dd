"""Advise benchmark (not a test): how long does `lab advise` take to answer a target?

Runs the real `lab advise` (two models by default, a target they can meet, the default step
durations of the `quick` scenario) a few times and reports the wall time of each run, the steps
it measured per model and what it advised, so the figure in docs/benchmarks.md can be checked.
The aim on a 2-core machine is under 6 minutes for a feasible target.

Usage: .venv/bin/python benchmarks/advise.py [--models uwsgi-threads,gunicorn-asyncio]
       [--rps 300] [--p99-ms 250] [--rounds 1] [--out results/bench-advise]
       [--summary docs/figures/bench-advise.json] [-- LAB ADVISE ARGS]
`--summary` writes the rounds as the docs figure's summary, named by the advise runs' ids.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

AIM_S = 6 * 60


def advise_once(args: argparse.Namespace, extra: list[str]) -> tuple[float, int, dict[str, Any]]:
    """One `lab advise --json` run: its wall time, exit code and advice."""
    argv = [sys.executable, "-c", "from lab.cli.main import entry; entry()", "advise"]
    argv += ["--rps", str(args.rps), "--p99-ms", str(args.p99_ms), "--models", args.models]
    argv += ["--out", str(args.out), "--json", *extra]
    start = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=AIM_S * 3)
    took = time.monotonic() - start
    if done.returncode not in (0, 1, 4, 5):  # answered, none, not confirmed, only a port
        raise SystemExit(f"lab advise failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return took, done.returncode, json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="uwsgi-threads,gunicorn-asyncio")
    parser.add_argument("--rps", type=float, default=300.0)
    parser.add_argument("--p99-ms", type=float, default=250.0)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path("results/bench-advise"))
    parser.add_argument("--summary", type=Path, help="Write the docs figure's summary here.")
    args, extra = parser.parse_known_args()
    extra = [a for a in extra if a != "--"]
    table = Table(title=f"lab advise --rps {args.rps:g} --p99-ms {args.p99_ms:g} ({args.models})")
    for column in ("round", "wall s", "exit", "steps per model", "recommended"):
        table.add_column(column)
    walls, rows, runs = [], [], []
    for i in range(1, args.rounds + 1):
        took, code, advice = advise_once(args, extra)
        walls.append(took)
        steps = ", ".join(f"{m['model']} {m['steps']}" for m in advice["models"])
        table.add_row(str(i), f"{took:.0f}", str(code), steps, str(advice["recommended"]))
        rows.append(figure_row(args, took, code, advice))
        runs.append(Path(advice["run_dir"]).name)
    if args.summary:
        write_summary(args.summary, rows, runs, args.out)
    out = Console()
    out.print(table)
    worst = max(walls)
    verdict = "within" if worst <= AIM_S else "beyond"
    out.print(f"slowest round {worst:.0f} s: {verdict} the aim of {AIM_S / 60:.0f} minutes")


def figure_row(
    args: argparse.Namespace, took: float, code: int, advice: dict[str, Any]
) -> list[str]:
    """One round as the docs table's row: target, models, wall time, steps, exit and answer."""
    target = f"{args.rps:g} req/s, p99 <= {args.p99_ms:g} ms"
    steps = ", ".join(f"{m['model']} {m['steps']}" for m in advice["models"])
    return [target, steps, f"{took:.0f} s", str(code), advice["recommendation"]]


def write_summary(path: Path, rows: list[list[str]], runs: list[str], out: Path) -> None:
    """The rounds as a figure summary (analysis/docfigures.py renders its table), the machine
    as the first advise run's manifest recorded it."""
    env = json.loads((out / runs[0] / "manifest.json").read_text()).get("environment", {})
    cpu = str(env.get("cpu_model", "?")).replace("(R)", "")
    summary = {
        "run_id": runs[0],
        "runs": runs,
        "machine": f"{env.get('cpus', '?')} CPUs ({cpu}), Python {env.get('python', '?')}, "
        "shared with other work",
        "date": datetime.now(UTC).strftime("%-d %B %Y"),
        "command": "python benchmarks/advise.py " + " ".join(sys.argv[1:]),
        "view": "table",
        "headers": ["target", "steps per model", "wall time", "exit", "lab advise's answer"],
        "align": ["---", "---", "---:", "---:", "---"],
        "rows": rows,
    }
    path.write_text(json.dumps(summary, indent=1) + "\n")


if __name__ == "__main__":
    main()
