"""Benchmark (not a test): does the lab's generator report the latency independent tools report?

One server (gunicorn-asyncio by default, 200 coroutines, on the server's cores) and one route
(`/sleep?ms=10`: no upstream in the path, so only the server and the client are measured). At
each load, in alternating rounds on the same client cores (shared machines are noisy: only ratios
measured together mean anything):

- closed loop, N users: the lab's generator beside wrk (`wrk -t1 -cN --latency`) and oha
  (`oha -c N`);
- open loop, R req/s: the lab's open step on each engine (`lab.run.engine`: oha, the default
  where installed, and the lab's own Python scheduler) beside a separate oha run with the oha
  engine's own command line (`oha -q R -c 500 --latency-correction -z settle+window`: latency
  from each request's intended start, as the lab measures it), read from its own per-request
  records, the requests due in the same window after the same settle (its summary would count
  the settle, where it opens its connections). The oha engine's target: p99 within 5% or 1 ms
  of oha alone's (the last column). Each round runs the tools in a rotated order.

It prints each tool's p99 and throughput, the lab's p99 and throughput on each engine as ratios
of the reference tool's (wrk for closed loop when present, else oha; oha alone for open loop),
and the lab's own engine's loop lag (how late a timer on its event loop fired: p99 and max) with
the share of its wall time spent in its own periodic work (oha's engine has no such probe). A
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
import json
import os
import re
import shutil
import sqlite3
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from benchmarks.figures import write_summary
from benchmarks.open_loop_scale import oha_path
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
# The oha engine's target: its p99 within this share, or this many ms, of oha alone's.
OHA_ENGINE_P99_SHARE = 0.05
OHA_ENGINE_P99_MS = 1.0


@dataclass(frozen=True)
class Figures:
    """One tool's run at one load."""

    p99_ms: float
    rps: float
    lag_p99_ms: float = -1.0  # the lab's generator only
    lag_max_ms: float = -1.0
    periodic_pct: float = -1.0
    send_late_p50_ms: float = -1.0  # the lab's open loop: actual send - intended
    send_late_p99_ms: float = -1.0


@dataclass(frozen=True)
class Load:
    """A closed-loop level (users) or an open-loop rate (req/s)."""

    mode: str
    value: int

    @property
    def label(self) -> str:
        return f"closed, {self.value} users" if self.mode == "closed" else f"open, {self.value}/s"


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
    return Figures(
        done.latency_ms["p99"],
        done.ok / done.duration_s,
        lag.get("p99", -1.0),
        lag.get("max", -1.0),
        done.periodic_pct,
        late.get("p50", -1.0),
        late.get("p99", -1.0),
    )


def wrk(url: str, load: Load, seconds: float, cpus: tuple[int, ...]) -> Figures:
    argv = ["wrk", "-t1", f"-c{load.value}", f"-d{round(seconds)}s", "--latency", url + ROUTE]
    out = _run(procs.pinned(argv, cpus), seconds)
    p99 = re.search(r"^\s*99%\s+([\d.]+)(us|ms|s)\s*$", out, re.MULTILINE)
    rps = re.search(r"Requests/sec:\s*([\d.]+)", out)
    if p99 is None or rps is None:
        raise RuntimeError(f"wrk printed no latency distribution: {out[-300:]!r}")
    scale = {"us": 0.001, "ms": 1.0, "s": 1000.0}[p99[2]]
    return Figures(float(p99[1]) * scale, float(rps[1]))


def oha(url: str, load: Load, seconds: float, cpus: tuple[int, ...], workdir: Path) -> Figures:
    assert OHA is not None, "oha is not installed"
    if load.mode == "open":
        return oha_open(url, load, seconds, cpus, workdir)
    argv = [OHA, "--no-tui", "--output-format", "json", "-z", f"{round(seconds)}s"]
    argv += ["-c", str(load.value)]
    report = json.loads(_run(procs.pinned([*argv, url + ROUTE], cpus), seconds))
    return Figures(report["latencyPercentiles"]["p99"] * 1000, report["summary"]["requestsPerSec"])


def oha_open(url: str, load: Load, seconds: float, cpus: tuple[int, ...], workdir: Path) -> Figures:
    """oha alone at the rate with the very command line the oha engine gives it (its own
    threads, `-c` the lab's cap, `-q`, `--latency-correction`, `-z` settle + window, `-t`), on
    the same cores, read from its own per-request records with numpy alone (not the lab's
    code): the requests due in the window, by their intended start (the engine's trim), the
    answers' p99 from that start. Its own summary would count the settle, where each of its
    connections is opened."""
    start = step_start(url, load, seconds, "oha")
    assert start.engine == "oha", engine.cannot(start)
    db, summary = workdir / "anchor.db", workdir / "anchor.json"
    (share,) = driver.shares_of(start)
    _run(procs.pinned(driver.argv(start, share, SETTLE_S + seconds, (db, summary)), cpus), seconds)
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT start_latency_correction, end, status FROM oha").fetchall()
    db.unlink()
    summary.unlink()
    due, end, status = np.array(rows, dtype=float).reshape(-1, 3).T
    mine = (due >= SETTLE_S) & (due < SETTLE_S + seconds) & (status < 400)
    answered = (end >= SETTLE_S) & (end < SETTLE_S + seconds) & (status < 400)
    p99 = float(np.percentile((end - due)[mine], 99, method="inverted_cdf")) * 1000
    return Figures(p99, int(answered.sum()) / seconds)


def _run(argv: list[str], seconds: float) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 60, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{argv[0]} failed ({done.returncode}): {done.stderr[-300:]!r}")
    return done.stdout


def tools(load: Load) -> list[str]:
    """The independent tools that run this load, present on this machine. In open loop oha
    alone runs twice a round (`oha:again`): the anchor against itself, the spread any engine's
    ratio to it must be read against (a 5% target is unreadable where oha differs from oha by
    more)."""
    wanted = ["wrk", "oha"] if load.mode == "closed" else ["oha", "oha:again"]
    return [t for t in wanted if t == "wrk" and shutil.which("wrk") or t.startswith("oha") and OHA]


def engines(load: Load) -> list[str]:
    """The lab's engines for this load: oha's (where installed) and its own in open loop."""
    return ["oha", "lab"] if load.mode == "open" and OHA else ["lab"]


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


def median(runs: list[Figures], field: str) -> float:
    return statistics.median(getattr(r, field) for r in runs)


HEADERS = ["load", "tool", "engine", "p99 ms", "req/s", "p99 / reference", "req/s / reference"]
HEADERS += ["gen lag p99 / max ms", "periodic work %", "send late p50 / p99 ms"]
HEADERS += ["within 5% or 1 ms of oha alone"]


def rows(measured: dict[tuple[Load, str], list[Figures]], loads: list[Load]) -> list[list[str]]:
    """At each load one row per lab engine, its figures also as ratios of the reference tool's
    (wrk in closed loop where present, else oha), then one per independent tool."""
    out: list[list[str]] = []
    for load in loads:
        ref = tools(load)[0] if tools(load) else None
        for i, on in enumerate(engines(load)):
            ours = measured[(load, f"lab:{on}")]
            p99, rps = median(ours, "p99_ms"), median(ours, "rps")
            ratios, within = ["", ""], ""
            if ref is not None:
                theirs = measured[(load, ref)]
                their_p99 = median(theirs, "p99_ms")
                ratios = [f"{p99 / their_p99:.2f}", f"{rps / median(theirs, 'rps'):.2f}"]
                if on == "oha":
                    within = "yes" if meets(p99, their_p99) else "no"
                    within += f" (rounds' own ratios: {spread(ours, theirs)})"
            row = [load.label if i == 0 else "", "lab", on]
            own = _own(ours, load, on)
            out.append([*row, f"{p99:.1f}", f"{rps:.0f}", *ratios, *own, within])
        for tool in tools(load):
            theirs = measured[(load, tool)]
            their = [f"{median(theirs, 'p99_ms'):.1f}", f"{median(theirs, 'rps'):.0f}"]
            again = ""
            if tool == "oha:again" and ref is not None:  # the anchor against itself
                anchor = measured[(load, ref)]
                again = f"oha alone against itself, rounds' ratios: {spread(theirs, anchor)}"
            out.append(["", tool, "-", *their, "", "", "", "", "", again])
    return out


def spread(ours: list[Figures], theirs: list[Figures]) -> str:
    """Each round's own p99 ratio (ours over theirs, measured minutes apart; on a shared machine
    drift between rounds moves both, so one round's ratio is steadier than the ratio of the
    medians): their median and range."""
    r = sorted(a.p99_ms / b.p99_ms for a, b in zip(ours, theirs, strict=True))
    return f"median {statistics.median(r):.2f}, range {r[0]:.2f}-{r[-1]:.2f}"


def meets(p99: float, anchor: float) -> bool:
    """The oha engine's target: p99 within OHA_ENGINE_P99_SHARE or OHA_ENGINE_P99_MS of oha
    alone's, whichever is larger."""
    return abs(p99 - anchor) <= max(OHA_ENGINE_P99_SHARE * anchor, OHA_ENGINE_P99_MS)


def _own(ours: list[Figures], load: Load, on: str) -> list[str]:
    """The lab's engine's own figures: its loop lag, its periodic work, its sends' lateness."""
    late = f"{median(ours, 'send_late_p50_ms'):.2f} / {median(ours, 'send_late_p99_ms'):.2f}"
    late = late if load.mode == "open" else ""
    if on == "oha":  # no loop probe; its sends' lateness is its queue behind busy connections
        return ["", "", late]
    lag = f"{median(ours, 'lag_p99_ms'):.2f} / {median(ours, 'lag_max_ms'):.1f}"
    return [lag, f"{median(ours, 'periodic_pct'):.2f}", late]


def table(body: list[list[str]]) -> Table:
    out = Table(title=f"{MODEL} {ROUTE}: the lab beside independent tools (medians of rounds)")
    for col in HEADERS:
        out.add_column(col)
    for row in body:
        out.add_row(*row)
    return out


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
    console.print(table(body))
    if args.summary:
        kept = f"the script's printed table ({args.rounds} rounds of {args.seconds:g} s)"
        write_summary(args.summary, "latency-fidelity", HEADERS, body, kept, started)


MODEL = "gunicorn-asyncio"
ROUTE = "/sleep?ms=10"
OHA = oha_path()

if __name__ == "__main__":
    main()
