"""Benchmark (not a test): is the mock upstream ever what limits a model? Old engine vs new.

Side by side in one run, alternating rounds, each upstream pinned to the same core and wrk (an
independent C load tool, Debian package `wrk`) pinned to another:

1. Added latency at 1,000 connections x 100 ms: p50/p99 minus the 100 ms asked. The ideal rate
   there is 1,000 / 0.1 s = 10,000 req/s, so a per-core capacity above that cannot show at this
   delay: the issue's "20,000 req/s per core at 1,000 connections with 100 ms" is impossible as
   stated, hence
2. capacity per core at 1,000 connections x 10 ms (ideal 100,000 req/s: the upstream's CPU is the
   limit, so req/s here is what one core of it can serve), and
3. CPU per request (the upstream's user + system CPU seconds / requests served).

Usage: .venv/bin/python benchmarks/upstream_capacity.py [--seconds 8] [--rounds 2]
       [--connections 1000] [--processes 1]
"""

from __future__ import annotations

import argparse
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import psutil
from rich.console import Console
from rich.table import Table

from lab.backends.base import CpuLayout, upstream_argv
from lab.system import procs

ENGINES = ("aiohttp", "fast")
UNITS_MS = {"us": 0.001, "ms": 1.0, "s": 1000.0}


@dataclass(frozen=True)
class Result:
    engine: str
    delay_ms: int
    rps: float
    p50_ms: float
    p99_ms: float
    errors: int
    cpu_ms_per_request: float
    cpu_pct: float

    @property
    def rps_per_core(self) -> float:
        """Requests per CPU-second used: the capacity of one whole core even on a shared host."""
        return 1000 / self.cpu_ms_per_request if self.cpu_ms_per_request else float("nan")


def parse_wrk(text: str) -> tuple[float, float, float, int, int]:
    """(req/s, p50 ms, p99 ms, requests, socket errors + non-2xx) from `wrk --latency`."""

    def percentile(p: str) -> float:
        found = re.search(rf"^\s+{p}%\s+([\d.]+)(us|ms|s)\s*$", text, re.M)
        return float(found.group(1)) * UNITS_MS[found.group(2)] if found else float("nan")

    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", text).group(1))  # type: ignore[union-attr]
    total = int(re.search(r"(\d+) requests in", text).group(1))  # type: ignore[union-attr]
    errors = sum(int(n) for n in re.findall(r"(?:connect|read|write|timeout) (\d+)", text))
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
    return (
        rps,
        percentile("50"),
        percentile("99"),
        total,
        errors + int(non2xx.group(1) if non2xx else 0),
    )


def cpu_seconds(pid: int) -> float:
    root = psutil.Process(pid)
    total = 0.0
    for p in [root, *root.children(recursive=True)]:
        times = p.cpu_times()
        total += times.user + times.system
    return total


def measure(
    engine: str, delay_ms: int, args: argparse.Namespace, layout: CpuLayout, logs: Path
) -> Result:
    port = procs.free_port()
    flags = ["--engine", engine, "--processes", str(args.processes), "--backlog", "4096"]
    argv = upstream_argv(port, *flags)
    upstream = procs.start(
        "upstream",
        argv,
        log_path=logs / f"{engine}.log",
        cpus=layout.server,
        cwd=Path(__file__).resolve().parent.parent,
    )
    try:
        procs.wait_http(upstream, f"http://127.0.0.1:{port}/health", 15)
        before = cpu_seconds(upstream.pid)
        wrk = [
            "wrk",
            "-t1",
            f"-c{args.connections}",
            f"-d{args.seconds}s",
            "--latency",
            "--timeout",
            "10s",
            f"http://127.0.0.1:{port}/delay?ms={delay_ms}",
        ]
        if layout.client:
            wrk = ["taskset", "--cpu-list", ",".join(map(str, layout.client)), *wrk]
        out = subprocess.run(wrk, capture_output=True, text=True, timeout=args.seconds + 60)
        used = cpu_seconds(upstream.pid) - before
    finally:
        upstream.stop()
    rps, p50, p99, total, errors = parse_wrk(out.stdout)
    return Result(
        engine,
        delay_ms,
        rps,
        p50 - delay_ms,
        p99 - delay_ms,
        errors,
        1000 * used / max(total, 1),
        100 * used / args.seconds,
    )


def run(args: argparse.Namespace) -> list[Result]:
    layout = CpuLayout.split(pin=True)
    results = []
    with tempfile.TemporaryDirectory() as logs:
        for _ in range(args.rounds):
            for delay_ms in (100, 10):
                for engine in ENGINES:
                    results.append(measure(engine, delay_ms, args, layout, Path(logs)))
    return results


def median(results: list[Result], engine: str, delay_ms: int, field: str) -> float:
    return statistics.median(
        getattr(r, field) for r in results if r.engine == engine and r.delay_ms == delay_ms
    )


FIGURES = [
    (100, "rps", "req/s at 1,000 x 100 ms (ideal 10,000)"),
    (100, "p50_ms", "added p50 ms at 1,000 x 100 ms"),
    (100, "p99_ms", "added p99 ms at 1,000 x 100 ms"),
    (10, "rps", "capacity req/s per core at 1,000 x 10 ms"),
    (10, "rps_per_core", "req/s per CPU-second used at 10 ms"),
    (10, "cpu_ms_per_request", "CPU ms per request at 10 ms"),
    (10, "cpu_pct", "upstream CPU % at 10 ms"),
    (10, "errors", "errors at 10 ms"),
    (100, "errors", "errors at 100 ms"),
]


def report(results: list[Result], args: argparse.Namespace) -> None:
    table = Table(
        title=f"mock upstream, {args.processes} process(es), wrk -c{args.connections}, "
        f"median of {args.rounds} alternating rounds"
    )
    for column in ("figure", *ENGINES, "new / old"):
        table.add_column(column, justify="right")
    for delay_ms, field, label in FIGURES:
        old, new = (median(results, e, delay_ms, field) for e in ENGINES)
        ratio = f"{new / old:.2f}" if old else "-"
        table.add_row(label, f"{old:,.3f}", f"{new:,.3f}", ratio)
    Console().print(table)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--seconds", type=int, default=8)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--connections", type=int, default=1000)
    p.add_argument("--processes", type=int, default=1)
    args = p.parse_args()
    if shutil.which("wrk") is None:
        sys.exit("wrk not found: apt-get install wrk (scripts/setup.sh does it when run as root)")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 65536)), hard))
    report(run(args), args)


if __name__ == "__main__":
    main()
