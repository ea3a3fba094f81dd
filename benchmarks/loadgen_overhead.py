"""Benchmark (not a test): can the lab's own parts be trusted not to be the bottleneck?

Reports, side by side in one run (these machines are noisy, so only ratios measured together mean
anything):

1. Hook overhead: the lab's load generator (locust FastHttpSession users without a cookie jar +
   the HdrHistogram request hook + body check: `loadgen.closed_loop`) against plain locust
   FastHttpUser run by locust's own CLI, on the same fast target
   (the upstream's /health), alternating A/B rounds, each pinned to the same core.
2. The upstream at 1,000+ concurrent connections: added delay (latency minus the requested delay)
   and capacity, with its CPU use, driven by the lab's generator.

Usage: .venv/bin/python benchmarks/loadgen_overhead.py [--seconds 8] [--rounds 3]
       [--connections 1000]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from benchmarks.figures import write_summary
from lab.backends.base import CpuLayout, NativeBackend
from lab.config.scenario import UpstreamSpec
from lab.run.generator import run_step
from lab.system import procs
from lab.system.sampling import Sampler
from loadgen.protocol import Start

PLAIN_LOCUSTFILE = """
from locust import FastHttpUser, constant, task

class Plain(FastHttpUser):
    wait_time = constant(0)

    @task
    def hit(self):
        self.client.get("/health")
"""


def lab_generator(
    url: str, path: str, users: int, seconds: float, cpus: tuple[int, ...], workdir: Path
) -> dict[str, Any]:
    """The lab's own generator (the same client `lab run` uses) on `cpus`."""
    start = Start(
        base_url=url,
        path=path,
        users=users,
        settle_s=1.0 + users / 500,
        duration_s=seconds,
        timeout_s=60.0,
    )
    return vars(run_step(start, workdir / "lab.log", cpus=cpus))


def plain_locust_argv(url: str, users: int, seconds: float, workdir: Path) -> list[str]:
    """Plain locust's CLI (FastHttpUser, no lab hooks) for `seconds`, printing its JSON stats."""
    locustfile = workdir / "plain_locustfile.py"
    locustfile.write_text(PLAIN_LOCUSTFILE)
    return [
        *[sys.executable, "-m", "locust", "-f", str(locustfile), "--headless", "-H", url],
        *["-u", str(users), "-r", str(users), "-t", f"{int(seconds + 1)}s"],
        *["--json", "--only-summary", "--loglevel", "ERROR"],
    ]


def plain_locust_rps(out: str) -> float:
    """Requests per second from plain locust's `--json` output."""
    stats = json.loads(out)[0]
    return float(stats["num_requests"] / (stats["last_request_timestamp"] - stats["start_time"]))


def plain_locust(
    url: str, users: int, seconds: float, cpus: tuple[int, ...], workdir: Path
) -> float:
    """Requests per second of plain locust (its CLI, no lab hooks) over the same window length."""
    argv = procs.pinned(plain_locust_argv(url, users, seconds, workdir), cpus)
    done = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 120)
    return plain_locust_rps(done.stdout)


def hook_overhead(
    url: str, users: int, seconds: float, rounds: int, cpus: tuple[int, ...], workdir: Path
) -> dict[str, list[float]]:
    measured: dict[str, list[float]] = {"lab": [], "plain": [], "lab_cpu": []}
    for _ in range(rounds):
        lab = lab_generator(url, "/health", users, seconds, cpus, workdir)
        measured["lab"].append(lab["ok"] / lab["duration_s"])
        measured["lab_cpu"].append(lab["client_cpu_pct"])
        measured["plain"].append(plain_locust(url, users, seconds, cpus, workdir))
    return measured


def upstream_at(
    backend: NativeBackend,
    delay_ms: int,
    connections: int,
    seconds: float,
    cpus: tuple[int, ...],
    workdir: Path,
) -> dict:
    upstream = backend.start_upstream(UpstreamSpec(delay_ms=delay_ms), procs.free_port())
    sampler = Sampler(upstream.meter())
    try:
        sampler.start()
        result = lab_generator(
            upstream.url, f"/delay?ms={delay_ms}", connections, seconds, cpus, workdir
        )
    finally:
        sampler.stop()
        upstream.stop()
    lat = result["latency_ms"]
    return {
        "delay_ms": delay_ms,
        "connections": connections,
        "rps": result["ok"] / result["duration_s"],
        "ideal_rps": connections * 1000 / delay_ms,
        "added_p50_ms": lat["p50"] - delay_ms,
        "added_p99_ms": lat["p99"] - delay_ms,
        "errors": sum(result["errors"].values()),
        "upstream_cpu": sampler.mean_cpu(),
        "client_cpu": result["client_cpu_pct"],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=8.0)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--users", type=int, default=50, help="users for the hook-overhead rounds")
    p.add_argument("--connections", type=int, default=1000)
    p.add_argument("--hook-only", action="store_true", help="skip the upstream at 1,000+ part")
    p.add_argument("--summary", type=Path, help="Write the hook table as a docs figure summary.")
    args = p.parse_args()
    started = time.time()
    console = Console()
    layout = CpuLayout.split(pin=True)
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        backend = NativeBackend(workdir, layout)
        try:
            target = backend.start_upstream(UpstreamSpec(delay_ms=0), procs.free_port())
            m = hook_overhead(
                target.url, args.users, args.seconds, args.rounds, layout.client, workdir
            )
            target.stop()
            ups = [
                upstream_at(backend, d, args.connections, args.seconds, layout.client, workdir)
                for d in (() if args.hook_only else (1000, 100))
            ]
        finally:
            backend.close()

    rows = print_hook_table(console, args, layout, m)
    if args.summary:
        kept = f"{args.users} users, {args.rounds} alternating rounds of {args.seconds:.0f} s"
        write_summary(args.summary, "loadgen-overhead", HOOK_HEADERS, rows, kept, started)
    if ups:
        print_upstream_table(console, args, ups)


HOOK_HEADERS = ["generator", "rps per round", "median rps", "vs plain", "CPU per request"]
GENERATORS = {
    "plain": "plain locust FastHttpUser (locust's CLI)",
    "lab": "lab generator (FastHttpSession users, no cookie jar, HdrHistogram hook, body check)",
}


def print_hook_table(
    console: Console, args: argparse.Namespace, layout: CpuLayout, m: dict[str, Any]
) -> list[list[str]]:
    """The table, printed; its rows. CPU per request is the lab generator's (median of the
    rounds): what its own work per request costs, to compare builds with."""
    t = Table(
        title=f"load generator on cores {list(layout.client)}, target on {list(layout.server)}"
        f": {args.users} users, {args.rounds} alternating rounds of {args.seconds:.0f} s"
    )
    for col in HOOK_HEADERS:
        t.add_column(col)
    plain = statistics.median(m["plain"])
    per_request = [cpu * 10 / rps for cpu, rps in zip(m["lab_cpu"], m["lab"], strict=True) if rps]
    cost = f"{statistics.median(per_request) * 1000:.0f} µs" if per_request else "no answers"
    rows = []
    for name in ("plain", "lab"):
        med = statistics.median(m[name])
        rounds = ", ".join(f"{v:.0f}" for v in m[name])
        rows.append([GENERATORS[name], rounds, f"{med:.0f}", f"{med / plain:.2f}", "-"])
    rows[-1][-1] = cost
    for row in rows:
        t.add_row(*row)
    console.print(t)
    console.print(f"lab generator CPU per round: {m['lab_cpu']} % of one core")
    return rows


UPSTREAM_COLUMNS = {
    "delay_ms": "delay ms",
    "rps": "rps",
    "ideal_rps": "ideal rps",
    "added_p50_ms": "added p50 ms",
    "added_p99_ms": "added p99 ms",
    "errors": "errors",
    "upstream_cpu": "upstream CPU %",
    "client_cpu": "client CPU %",
}


def print_upstream_table(
    console: Console, args: argparse.Namespace, ups: list[dict[str, Any]]
) -> None:
    u = Table(title=f"mock upstream at {args.connections} concurrent connections")
    for col in UPSTREAM_COLUMNS.values():
        u.add_column(col)
    for r in ups:
        u.add_row(
            *(f"{r[k]:.1f}" if isinstance(r[k], float) else str(r[k]) for k in UPSTREAM_COLUMNS)
        )
    console.print(u)


if __name__ == "__main__":
    main()
