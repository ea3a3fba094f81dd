"""What sampling the server costs: throughput and p99 with py-spy on and off, side by side.

Runs the real `lab run` in pairs, `--profile off` then `--profile all` (the two py-spy recorders
of `lab.system.profile` on the server's process tree through every measured step), alternating so
a drift of the machine falls on both, and prints per model and level: each mode's throughput and
p99 over the pairs (mean), and the change with the sampler on. The aim (issue 57): at most 3%.
The CPU route (`--route cpu`) is the worst case: a server whose CPU is the limit loses what the
sampler's reads take from it. Not a test: on a shared machine the figures are indicative.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from statistics import mean

from benchmarks.figures import print_table, write_summary
from lab.record.step import flat
from lab.record.stepjson import from_json

AIM_SHARE = 0.03  # issue 57: the sampler may cost the server at most this share of throughput
HEADERS = ["model", "route", "users", "req/s off", "req/s on", "change", "p99 ms off", "p99 ms on"]
HEADERS += ["change p99", "pairs"]


def run(out: Path, args: argparse.Namespace, mode: str) -> list[dict]:
    """One `lab run` with `--profile MODE`: its measured steps."""
    argv = [sys.executable, "-c", "from lab.cli.main import entry; entry()", "run"]
    argv += ["--models", args.models, "--levels", args.levels, "--route", args.route]
    argv += ["--duration", args.duration, "--warmup", args.warmup, "--profile", mode]
    argv += ["--out", str(out)]
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    (run_dir,) = out.iterdir()
    steps = [
        flat(from_json(json.loads(line)))
        for line in (run_dir / "steps.jsonl").read_text().splitlines()
    ]
    return [s for s in steps if s["status"] == "measured"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="gunicorn-gevent,gunicorn-asyncio")
    parser.add_argument("--levels", default="50")
    parser.add_argument("--route", default="cpu")
    parser.add_argument("--duration", default="5")
    parser.add_argument("--warmup", default="2")
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--summary", type=Path, help="Write the table as a docs figure summary.")
    args = parser.parse_args()
    started = time.time()
    seen: dict[tuple[str, int, str], list[dict]] = defaultdict(list)
    with tempfile.TemporaryDirectory(prefix="bench-profile-") as tmp:
        for i in range(args.pairs):
            for mode in ("off", "all"):
                for s in run(Path(tmp) / f"{i}-{mode}", args, mode):
                    seen[(s["model"], s["users"], mode)].append(s)
    rows = []
    for model, users in sorted({(m, u) for m, u, _ in seen}):
        off, on = seen[(model, users, "off")], seen[(model, users, "all")]
        rps = [mean(s["throughput_rps"] for s in each) for each in (off, on)]
        p99 = [mean(s["latency_ms"].get("p99", 0) for s in each) for each in (off, on)]
        rows.append(
            [model, args.route, str(users), f"{rps[0]:.0f}", f"{rps[1]:.0f}"]
            + [f"{rps[1] / rps[0] - 1:+.1%}", f"{p99[0]:.1f}", f"{p99[1]:.1f}"]
            + [f"{p99[1] / p99[0] - 1:+.1%}", str(min(len(off), len(on)))]
        )
    print_table("py-spy on against off, side by side", HEADERS, rows)
    print(f"wall time {time.time() - started:.0f} s; the aim: a change within -{AIM_SHARE:.0%}")
    if args.summary:
        kept = f"models {args.models}, route {args.route}, levels {args.levels}, "
        kept += f"{args.duration} s per level, {args.pairs} pairs"
        write_summary(args.summary, "profile_cost", HEADERS, rows, kept, started)


if __name__ == "__main__":
    main()
