"""Benchmark (not a test): does the lab's generator report the latency independent tools report?

One server (gunicorn-asyncio by default, 200 coroutines, on the server's cores) and one route
(`/sleep?ms=10`: no upstream in the path, so only the server and the client are measured). At
each load, in alternating rounds on the same client cores (shared machines are noisy: only ratios
measured together mean anything):

- closed loop, N users: the lab's step on each engine (oha, `-c N` without `-q`, the default
  where installed, and the lab's own gevent users) beside wrk (`wrk -t1 -cN --latency`) and oha
  alone (the oha engine's own command line, `oha -c N -z settle+window`, read from its records
  as in open loop below). The oha engine's target: p99 within 5% or 1 ms of the better of wrk's and
  oha alone's, throughput at least 0.98 of the better one's (the last column);
- open loop, R req/s: the lab's open step on each engine (`lab.run.engine`: oha, the default
  where installed, and the lab's own Python scheduler) beside a separate oha run with the oha
  engine's own command line (`oha -q R -c 500 --latency-correction -z settle+window`: latency
  from each request's intended start, as the lab measures it), read from its own per-request
  records, the requests due in the same window after the same settle (its summary would count
  the settle, where it opens its connections). The oha engine's target: p99 within 5% or 1 ms
  of oha alone's (the last column). Each round runs the tools in a rotated order.

It prints each tool's p99 and throughput, the lab's p99 and throughput on each engine as ratios
of the reference tool's (wrk for closed loop when present, else oha; oha alone for open loop),
the lab's own engine's loop lag (how late a timer on its event loop fired: p99 and max) with
the share of its wall time spent in its own periodic work (oha's engine has no such probe), and
every tool's CPU per request (the apparatus's cost: the lab's engines from their own measure
over the window, the independent tools from their process's CPU time over their run). A
tool that is missing is skipped with one line (wrk: `apt-get install wrk`; oha: `cargo install
oha`), and the oha engine's row with it.

`--edges` measures where the answer matters most instead (`benchmarks/fidelity_edges.py`): a
server that sheds load (503 at once beyond a few in flight) and a generator paused a few
milliseconds once a second, the lab's p99 over every request and its flags beside oha's.

`--summary docs/figures/bench-latency-fidelity.json` also writes the table as the docs' figure
summary (run id, machine, date, command), which `python -m analysis.docfigures refresh` renders
into docs/benchmarks.md.

Usage: .venv/bin/python benchmarks/latency_fidelity.py [--seconds 8] [--rounds 2]
       [--closed 10,50] [--open 300,800] [--model gunicorn-asyncio] [--route /sleep?ms=10]
       [--summary OUT.json]
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import sqlite3
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from rich.console import Console

from benchmarks.fidelity_table import HEADERS, OHA, Figures, Load, engines, rows, table, tools
from benchmarks.figures import write_summary
from lab.backends.base import CpuLayout, NativeBackend
from lab.config.models import load_registry
from lab.config.scenario import UpstreamSpec
from lab.run import engine
from lab.run.generator import run_step
from lab.run.generators import Generators
from lab.system import procs
from loadgen.oha import driver
from loadgen.protocol import Start

MAX_OUTSTANDING = 500  # open loop: the lab's default cap, and oha's connections
SETTLE_S = 1.0  # before the window: excluded from every figure, oha alone's too


def step_start(url: str, load: Load, seconds: float, on: str) -> Start:
    """The lab's step at this load on engine `on`, exactly as `lab run` starts it."""
    start = Start(
        base_url=url,
        path=ROUTE,
        users=load.value if load.mode == "closed" else MAX_OUTSTANDING,
        rate_rps=float(load.value) if load.mode == "open" else None,
        max_outstanding=MAX_OUTSTANDING if load.mode == "open" else 0,
        settle_s=SETTLE_S,
        duration_s=seconds,
        timeout_s=30.0,
    )
    return engine.applied(start, on, Generators(local=1))


def lab(
    url: str, load: Load, seconds: float, cpus: tuple[int, ...], workdir: Path, on: str = "lab"
) -> Figures:
    """The lab's step on engine `on`, exactly as `lab run` starts it."""
    start = step_start(url, load, seconds, on)
    assert start.engine == on, engine.cannot(start)
    done = run_step(start, workdir / "lab.log", cpus=cpus)
    lag = done.generator_lag_ms
    late = done.open_loop.send_lateness_ms if done.open_loop else {}
    cpu_ms = done.client_cpu_pct / 100 * done.duration_s * 1000  # over the window
    return Figures(
        done.latency_ms["p99"],
        done.ok / done.duration_s,
        lag.get("p99", -1.0),
        lag.get("max", -1.0),
        done.periodic_pct,
        late.get("p50", -1.0),
        late.get("p99", -1.0),
        cpu_ms / max(done.requests, 1),
    )


def wrk(url: str, load: Load, seconds: float, cpus: tuple[int, ...]) -> Figures:
    argv = ["wrk", "-t1", f"-c{load.value}", f"-d{round(seconds)}s", "--latency", url + ROUTE]
    out, cpu_s = _run(procs.pinned(argv, cpus), seconds)
    p99 = re.search(r"^\s*99%\s+([\d.]+)(us|ms|s)\s*$", out, re.MULTILINE)
    rps = re.search(r"Requests/sec:\s*([\d.]+)", out)
    if p99 is None or rps is None:
        raise RuntimeError(f"wrk printed no latency distribution: {out[-300:]!r}")
    scale = {"us": 0.001, "ms": 1.0, "s": 1000.0}[p99[2]]
    per = _per_request(cpu_s, float(rps[1]) * round(seconds))
    return Figures(float(p99[1]) * scale, float(rps[1]), cpu_ms_per_request=per)


def oha(url: str, load: Load, seconds: float, cpus: tuple[int, ...], workdir: Path) -> Figures:
    """oha alone at the load with the very command line the oha engine gives it (its own
    threads, `-c` the users or the lab's cap, in open loop `-q` and `--latency-correction`, `-z`
    settle + window, `-t`), on the same cores, read from its own per-request records with numpy
    alone (not the lab's code): the requests due (closed loop: sent) in the window, the engine's
    trim, the answers' p99 from that start. Its own summary would count the settle, where each
    of its connections is opened: at 200 users that put its p99 at 2-4 s beside wrk's 0.7 s."""
    assert OHA is not None, "oha is not installed"
    start = step_start(url, load, seconds, "oha")
    assert start.engine == "oha", engine.cannot(start)
    db, summary = workdir / "anchor.db", workdir / "anchor.json"
    (share,) = driver.shares_of(start)
    argv = driver.argv(start, share, SETTLE_S + seconds, (db, summary))
    _, cpu_s = _run(procs.pinned(argv, cpus), seconds)
    with sqlite3.connect(db) as conn:
        rows = conn.execute(
            "SELECT coalesce(start_latency_correction, start), end, status FROM oha"
        ).fetchall()
    db.unlink()
    summary.unlink()
    due, end, status = np.array(rows, dtype=float).reshape(-1, 3).T
    mine = (due >= SETTLE_S) & (due < SETTLE_S + seconds) & (status < 400)
    answered = (end >= SETTLE_S) & (end < SETTLE_S + seconds) & (status < 400)
    p99 = float(np.percentile((end - due)[mine], 99, method="inverted_cdf")) * 1000
    per = _per_request(cpu_s, len(due))
    return Figures(p99, int(answered.sum()) / seconds, cpu_ms_per_request=per)


def _run(argv: list[str], seconds: float) -> tuple[str, float]:
    """The tool's output and the CPU seconds it used (its process and any it waited for)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 60, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"{argv[0]} failed ({done.returncode}): {done.stderr[-300:]!r}")
    cpu_s = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return done.stdout, cpu_s


def _per_request(cpu_s: float, requests: float) -> float:
    """CPU milliseconds per request (-1: none sent)."""
    return 1000 * cpu_s / requests if requests > 0 else -1.0


def rounds(
    url: str, loads: list[Load], args: argparse.Namespace, cpus: tuple[int, ...], workdir: Path
) -> dict[tuple[Load, str], list[Figures]]:
    """Every tool at every load, the lab first, in alternating rounds."""
    runners: dict[str, Callable[[Load], Figures]] = {
        "lab:lab": lambda load: lab(url, load, args.seconds, cpus, workdir),
        "lab:oha": lambda load: lab(url, load, args.seconds, cpus, workdir, "oha"),
        "wrk": lambda load: wrk(url, load, args.seconds, cpus),
        "oha": lambda load: oha(url, load, args.seconds, cpus, workdir),
        "oha:again": lambda load: oha(url, load, args.seconds, cpus, workdir),
    }
    measured: dict[tuple[Load, str], list[Figures]] = {}
    for i in range(args.rounds):
        for load in loads:
            for tool in rotated([*(f"lab:{e}" for e in engines(load)), *tools(load)], i):
                measured.setdefault((load, tool), []).append(runners[tool](load))
    return measured


def rotated(order: list[str], by: int) -> list[str]:
    """The tools' order in round `by`: each goes first in turn, so none always runs straight
    after another load (its server warmer, its connections just closed) and order is no bias."""
    k = by % len(order)
    return order[k:] + order[:k]


def _levels(text: str, mode: str) -> list[Load]:
    return [Load(mode, int(v)) for v in text.split(",") if v.strip()]


def main() -> None:
    global MODEL, ROUTE
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=8.0)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--closed", default="10,50", help="closed-loop users, comma-separated")
    p.add_argument("--open", default="300,800", help="open-loop rates (req/s), comma-separated")
    p.add_argument("--model", default=MODEL)
    p.add_argument("--route", default=ROUTE)
    p.add_argument("--concurrency", type=int, default=200, help="the server's concurrency knob")
    p.add_argument("--summary", type=Path, help="also write the table as a docs figure summary")
    p.add_argument("--edges", action="store_true", help="load shedding and a paused generator")
    p.add_argument("--shed-limit", type=int, default=20, help="--edges: requests it holds")
    p.add_argument("--pause-ms", type=float, default=5.0, help="--edges: the pause, once a s")
    args = p.parse_args()
    if args.edges:
        from benchmarks.fidelity_edges import edges

        edges(args, OHA)
        return
    started = time.time()
    MODEL, ROUTE = args.model, args.route
    loads = _levels(args.closed, "closed") + _levels(args.open, "open")
    console = Console(width=130)
    layout = CpuLayout.split(pin=True)
    console.print(
        f"{os.cpu_count()} cores; client on {list(layout.client)}, server on "
        f"{list(layout.server)}; load average {os.getloadavg()[0]:.1f} (shared machine?)"
    )
    for load in loads:
        if missing := {"closed": ["wrk", "oha"], "open": ["oha"]}[load.mode]:
            absent = [t for t in missing if t not in tools(load)]
            if absent:
                console.print(f"{load.label}: skipping {', '.join(absent)} (not installed)")
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        backend = NativeBackend(workdir, layout)
        try:
            upstream = backend.start_upstream(UpstreamSpec(delay_ms=10), procs.free_port())
            registry = load_registry(None)
            knobs = registry.knobs.resolve(args.concurrency)
            server = backend.start_server(
                registry.models[MODEL], knobs, upstream.url, procs.free_port()
            )
            measured = rounds(server.url, loads, args, layout.client, workdir)
        finally:
            backend.close()
    body = rows(measured, loads)
    console.print(table(body, f"{MODEL} {ROUTE}"))
    if args.summary:
        kept = f"the script's printed table ({args.rounds} rounds of {args.seconds:g} s)"
        write_summary(args.summary, "latency-fidelity", HEADERS, body, kept, started)


MODEL = "gunicorn-asyncio"
ROUTE = "/sleep?ms=10"

if __name__ == "__main__":
    main()
