"""Stop every long command at many random moments: how many stops held, at how many moments.

`python -m benchmarks.stop_sweep --stops 60 --seed 1 [--summary FILE]` draws each stop at random:
a command (every case of tests/stopharness.py: `lab run`, `lab advise`, `lab reproduce`, `lab ui`,
`lab serve`, `lab upstream`, `lab generator` and the Compose services' entry points), a signal
(SIGINT, SIGTERM, SIGHUP, SIGKILL), the command alone or its whole process group, and a moment
uniformly within the time the command runs (serving commands: their first `--serving-s`). Each
stop runs in the harness (a subreaper) and holds when nothing of the lab runs after the grace
period, the exit code is the table's for the signal, and every finished step is intact (run and
advise directories are resumed, keeping every finished step). Prints a line per stop that did not
hold and a table per command: stops tried, distinct moments met (start-up, check, a step, the
report, serving) and how many held. tests/test_stop_anywhere.py is the bounded CI set.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections import defaultdict
from dataclasses import asdict
from pathlib import Path
from typing import Any

from tests.stopharness import CASES, SIGNALS, Outcome, one

RESUMABLE = ("run", "advise")


def draw(rng: random.Random, serving_s: float, names: list[str]) -> tuple[str, str, float, bool]:
    name = rng.choice(names)
    horizon = CASES[name].runs_for_s or serving_s
    return name, rng.choice(sorted(SIGNALS)), round(rng.uniform(0, horizon), 2), rng.random() < 0.3


def table(outcomes: list[Outcome]) -> list[dict[str, Any]]:
    """Per command: stops tried, distinct moments met, stops that held."""
    by_case: dict[str, list[Outcome]] = defaultdict(list)
    for outcome in outcomes:
        by_case[outcome.case].append(outcome)
    return [
        {
            "command": name,
            "stops": len(items),
            "moments": sorted({o.moment for o in items}),
            "held": sum(o.ok for o in items),
        }
        for name, items in sorted(by_case.items())
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.stop_sweep", description=__doc__)
    parser.add_argument("--stops", type=int, default=60)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--serving-s", type=float, default=8.0)
    parser.add_argument("--summary", type=Path)
    parser.add_argument("--commands", default=",".join(sorted(CASES)), help="cases to draw from")
    args = parser.parse_args(argv)
    names = [n for n in args.commands.split(",") if n in CASES]
    rng = random.Random(args.seed)
    outcomes = []
    for i in range(args.stops):
        name, sig, delay_s, group = draw(rng, args.serving_s, names)
        outcome = one(name, sig, delay_s, group, resumed=name in RESUMABLE)
        outcomes.append(outcome)
        verdict = "held" if outcome.ok else "FAILED"
        where = f"{name} {sig}{' (group)' if group else ''} at {delay_s} s ({outcome.moment})"
        print(f"{i + 1}/{args.stops} {verdict}: {where}, exit {outcome.exit_code}", flush=True)
        if not outcome.ok:
            print(f"  {json.dumps(asdict(outcome))[:1500]}", flush=True)
    rows = table(outcomes)
    for row in rows:
        print(f"{row['command']:<18} {row['stops']:>3} stops, {row['held']:>3} held, moments:"
              f" {', '.join(map(str, row['moments']))}")  # fmt: skip
    moments = len({(o.case, o.moment) for o in outcomes})
    held = sum(o.ok for o in outcomes)
    print(f"{held} of {len(outcomes)} stops held, at {moments} distinct (command, moment) pairs")
    if args.summary:
        summary = {"seed": args.seed, "stops": len(outcomes), "held": held, "rows": rows}
        summary["failed"] = [asdict(o) for o in outcomes if not o.ok]
        args.summary.write_text(json.dumps(summary, indent=1) + "\n")
    return 0 if held == len(outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
