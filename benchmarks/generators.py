"""Benchmark (not a test): how much load the lab's generators make per core, and what it costs.

Side by side in one run, in alternating rounds (shared machines are noisy: only ratios measured
together mean anything):

1. Against a fast target (the upstream's /health, pinned to the server's cores, so the client is
   the limit): req/s per client core of the lab's generator (1 process), of N lab generators
   (`--generators N`: a locust master and N workers), of plain locust FastHttpUser (its own CLI)
   and of wrk (Debian's `wrk`, installed with apt-get when missing and run as root).
2. Against a real model (gunicorn-asyncio, /io with a 10 ms upstream delay): CPU per request of
   the apparatus (generator + upstream) against the server's.

Usage: .venv/bin/python benchmarks/generators.py [--seconds 6] [--rounds 2] [--users 64]
       [--generators 2]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from benchmarks.figures import pinned_split
from benchmarks.loadgen_overhead import plain_locust_argv, plain_locust_rps
from lab.backends.base import CpuLayout, LocalServer, NativeBackend
from lab.config.models import load_registry
from lab.config.scenario import UpstreamSpec
from lab.run import generators
from lab.run.generator import run_step
from lab.system import procs
from lab.system.sampling import Sampler, TreeMeter
from loadgen.protocol import Done, Start
from servers.common import expected_body

Result = tuple[float, float]  # (req/s, client CPU % of one core)


def lab(
    url: str, path: str, users: int, seconds: float, n: int, cpus: tuple[int, ...], workdir: Path
) -> Result:
    body = expected_body(path).decode() if path.startswith("/io") else None
    load = {"users": users, "duration_s": seconds, "timeout_s": 30.0, "expected_body": body}
    done = pinned_step(url, path, n, cpus, workdir / "lab.log", **load)
    return done.ok / done.duration_s, done.client_cpu_pct


def pinned_step(url: str, path: str, n: int, cpus: tuple[int, ...], log: Path, **load: Any) -> Done:
    """One step of the lab's own generator on `cpus` (this benchmark's and
    benchmarks/open_loop_scale.py's): `n` generator processes on the cores its master leaves
    them, after a 1 s settle; `load` is the rest of the step (users or a rate, the window, the
    timeout)."""
    cores = generators.worker_cores(cpus)
    start = Start(url, path, settle_s=1.0, generators=n, generator_cpus=cores, **load)
    return run_step(start, log, cpus=cpus)


def sampled(argv: list[str], seconds: float, parse: Callable[[str], float]) -> Result:
    """Run a tool, sample its CPU after a one-second start-up, return (req/s, CPU %)."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    time.sleep(1.0)
    sampler = Sampler(TreeMeter(proc.pid))
    sampler.start()
    out, _ = proc.communicate(timeout=seconds + 60)
    sampler.stop()
    return parse(out), sampler.mean_cpu()


def plain_locust(
    url: str, users: int, seconds: float, cpus: tuple[int, ...], workdir: Path
) -> Result:
    argv = procs.pinned(plain_locust_argv(url, users, seconds, workdir), cpus)
    return sampled(argv, seconds, plain_locust_rps)


def wrk(
    url: str, users: int, seconds: float, cpus: tuple[int, ...], path: str = "/health"
) -> Result:
    wrk_argv = ["wrk", "-t1", f"-c{users}", f"-d{int(seconds + 1)}s", url + path]
    argv = procs.pinned(wrk_argv, cpus)
    return sampled(argv, seconds, _wrk_rps)


def _wrk_rps(out: str) -> float:
    found = re.search(r"Requests/sec:\s*([\d.]+)", out)
    if found is None:
        raise RuntimeError(f"wrk printed no Requests/sec: {out[-300:]!r}")
    return float(found[1])


def ensure_wrk() -> bool:
    if shutil.which("wrk"):
        return True
    if os.geteuid() == 0 and shutil.which("apt-get"):
        subprocess.run(["apt-get", "install", "-y", "-q", "wrk"], capture_output=True, check=False)
    return shutil.which("wrk") is not None


def fast_target_rounds(
    url: str, args: argparse.Namespace, cpus: tuple[int, ...], workdir: Path
) -> dict[str, list[Result]]:
    """Every generator on the same target and cores, in alternating rounds."""
    runs: dict[str, Callable[[], Result]] = {
        "lab, 1 generator": lambda: lab(url, "/health", args.users, args.seconds, 1, cpus, workdir),
        f"lab, {args.generators} generators": lambda: lab(
            url, "/health", args.users, args.seconds, args.generators, cpus, workdir
        ),
        "plain locust FastHttpUser": lambda: plain_locust(
            url, args.users, args.seconds, cpus, workdir
        ),
    }
    if ensure_wrk():
        runs["wrk -t1"] = lambda: wrk(url, args.users, args.seconds, cpus)
    measured: dict[str, list[Result]] = {name: [] for name in runs}
    for _ in range(args.rounds):
        for name, run in runs.items():
            measured[name].append(run())
    return measured


def model_costs(
    backend: NativeBackend, args: argparse.Namespace, cpus: tuple[int, ...], workdir: Path
) -> dict[str, float]:
    """CPU per request (ms) of the apparatus (generator + upstream) and of the server."""
    upstream = backend.start_upstream(UpstreamSpec(delay_ms=10), procs.free_port())
    registry = load_registry(None)
    knobs = registry.knobs.resolve(args.users)
    server = backend.start_server(
        registry.models["gunicorn-asyncio"], knobs, upstream.url, procs.free_port()
    )
    samplers = [Sampler(s.meter()) for s in (server, upstream)]
    for s in samplers:
        s.start()
    rps, client = lab(server.url, "/io?delay_ms=10", args.users, args.seconds, 1, cpus, workdir)
    for s in samplers:
        s.stop()
    server.stop()
    upstream.stop()
    per_request = 10 / max(rps, 1e-9)  # CPU % of a core / req/s = 10 x ms of CPU per request
    return {
        "rps": rps,
        "server_ms": samplers[0].mean_cpu() * per_request,
        "generator_ms": client * per_request,
        "upstream_ms": samplers[1].mean_cpu() * per_request,
    }


def print_fast(console: Console, measured: dict[str, list[Result]], title: str) -> None:
    table = Table(title=title)
    for col in (
        "generator",
        "req/s per round",
        "median req/s",
        "client CPU %",
        "req/s per core",
        "vs lab, 1",
    ):
        table.add_column(col)
    per_core = {
        n: statistics.median(r / max(c, 1.0) * 100 for r, c in v) for n, v in measured.items()
    }
    base = per_core["lab, 1 generator"]
    for name, results in measured.items():
        table.add_row(
            name,
            ", ".join(f"{r:.0f}" for r, _ in results),
            f"{statistics.median(r for r, _ in results):.0f}",
            f"{statistics.median(c for _, c in results):.0f}",
            f"{per_core[name]:.0f}",
            f"{per_core[name] / base:.2f}",
        )
    console.print(table)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=6.0)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--users", type=int, default=64)
    p.add_argument("--generators", type=int, default=2)
    args = p.parse_args()
    console = Console()
    layout = pinned_split(console, "client")
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        backend = NativeBackend(workdir, layout)
        on_server = NativeBackend(workdir, CpuLayout(client=layout.server))  # target's cores
        try:
            target: LocalServer = on_server.start_upstream(
                UpstreamSpec(delay_ms=0), procs.free_port()
            )
            measured = fast_target_rounds(target.url, args, layout.client, workdir)
            target.stop()
            costs = model_costs(backend, args, layout.client, workdir)
        finally:
            backend.close()
            on_server.close()
    print_fast(
        console,
        measured,
        f"fast target (/health), {args.users} connections, "
        f"{args.rounds} alternating rounds of {args.seconds:.0f} s",
    )
    n = f"lab, {args.generators} generators"
    ratio = statistics.median(r for r, _ in measured[n]) / statistics.median(
        r for r, _ in measured["lab, 1 generator"]
    )
    console.print(
        f"{args.generators} generators vs 1: {ratio:.2f}x req/s (goal >= "
        f"{0.8 * args.generators:.1f}x when the client, not the target, is the limit "
        f"and each generator has a core of its own)"
    )
    apparatus = costs["generator_ms"] + costs["upstream_ms"]
    console.print(
        f"gunicorn-asyncio /io 10 ms, {args.users} users: {costs['rps']:.0f} req/s; CPU "
        f"per request: generator {costs['generator_ms']:.3f} ms + upstream "
        f"{costs['upstream_ms']:.3f} ms = apparatus {apparatus:.3f} ms vs server "
        f"{costs['server_ms']:.3f} ms (ratio {apparatus / max(costs['server_ms'], 1e-9):.2f}"
        f", goal <= 0.5)"
    )


if __name__ == "__main__":
    main()
