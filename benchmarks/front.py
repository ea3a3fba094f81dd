"""Bare vs behind nginx: what the front costs and what it saves, per model, side by side.

Runs the real `lab run --front bare,nginx` (each model bare and as NAME+nginx, interleaved like
trials, in one sweep) at 50 and 200 users and prints, per model and level: throughput, p50, p99,
CPU per request of the server, the front and the generator, and the TCP connections the client
side closed per request (near 1 for a bare uWSGI model, which closes each connection; near 0
behind nginx, which keeps the client's alive). Not a test: run it under the load lock.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.figures import write_summary
from lab.record.step import flat
from lab.record.stepjson import from_json

MODELS = "uwsgi-threads,uwsgi-gevent,gunicorn-gthread,uvicorn"
HEADERS = [
    "model",
    "front",
    "users",
    "req/s",
    "p50 ms",
    "p99 ms",
    "server CPU ms/req",
    "front CPU ms/req",
    "generator CPU ms/req",
    "client conns closed/req",
    "limited by",
]


def per_request(pct: float, step: dict) -> float:
    """A mean CPU share (% of a core) as milliseconds per answered request."""
    return pct * step["duration_s"] * 10 / max(step["requests"], 1)


def row(step: dict) -> list[str]:
    base, _, front = step["model"].partition("+")
    front_ms = step["front_cpu_ms_per_req"]
    closed = step["server_connections"] / max(step["requests"], 1)
    return [
        base,
        front or "bare",
        str(step["users"]),
        f"{step['throughput_rps']:.0f}",
        f"{step['latency_ms'].get('p50', 0):.1f}",
        f"{step['latency_ms'].get('p99', 0):.1f}",
        f"{step['server_cpu_ms_per_req'] or 0:.2f}",
        "-" if front_ms is None else f"{front_ms:.2f}",
        f"{per_request(step['client_cpu_pct'], step):.2f}",
        f"{closed:.2f}",
        step["limited_by"] + (f" ({','.join(step['flags'])})" if step["flags"] else ""),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=MODELS)
    parser.add_argument("--levels", default="50,200")
    parser.add_argument("--duration", default="5")
    parser.add_argument("--warmup", default="2")
    parser.add_argument("--summary", type=Path, help="Write the table as a docs figure summary.")
    args = parser.parse_args()
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="bench-front-") as out:
        argv = [sys.executable, "-c", "from lab.cli.main import entry; entry()", "run"]
        argv += ["--models", args.models]
        argv += ["--levels", args.levels, "--duration", args.duration, "--warmup", args.warmup]
        argv += ["--front", "bare,nginx", "--out", out]
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
        (run,) = Path(out).iterdir()
        steps = [
            flat(from_json(json.loads(line)))
            for line in (run / "steps.jsonl").read_text().splitlines()
        ]
    steps.sort(key=lambda s: (s["model"].partition("+")[0], s["users"], s["model"]))
    rows = [row(s) for s in steps if s["status"] == "measured"]
    print(" | ".join(HEADERS))
    for r in rows:
        print(" | ".join(r))
    print(f"wall time {time.time() - started:.0f} s, run {run.name}")
    if args.summary:
        kept = f"models {args.models}, levels {args.levels}, {args.duration} s per level"
        write_summary(args.summary, "front", HEADERS, rows, kept, started)


if __name__ == "__main__":
    main()
