"""Benchmark (not a test): how far the lab's open loop scales over generator processes, beside oha.

Side by side in one run (only figures measured together mean anything on a shared machine):

1. Open loop against a target that is not the limit (the mock upstream's /delay, pinned to the
   server's cores): for each rate and 1..N generator processes, the rate offered, the rate sent on
   time (the generators' achieved arrival rate), answers per second, dropped requests and p99 from
   each request's intended start, with the generators' CPU; beside oha -q at the same rates with
   --latency-correction (p99 from the intended start too). Without oha, one line says so.
2. The closed-loop ceiling for a keep-alive server (gunicorn-asyncio) and a connection-closing one
   (uwsgi-threads) on /sleep, for 1..N generator processes, beside wrk -t1 where it is installed.

The highest rate one process offers on time (achieved >= 97%, nothing dropped, under 90% of its
core) and its CPU per arrival are what `lab.run.generators.OPEN_RPS_PER_GENERATOR` is chosen from.

Usage: .venv/bin/python benchmarks/open_loop_scale.py [--rates 500,1000,2000] [--generators 1,2]
       [--seconds 5] [--users 200] [--summary docs/figures/bench-open-loop-scale.json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

from benchmarks.figures import pinned_split, write_summary
from benchmarks.generators import ensure_wrk, pinned_step, wrk
from lab.backends.base import CpuLayout, NativeBackend
from lab.config.models import load_registry
from lab.config.scenario import UpstreamSpec
from lab.run import generators
from lab.system import procs
from loadgen.protocol import Done

TARGET_PATH = "/delay?ms=10"
SERVER_PATH = "/sleep?ms=10"
CAP = 2000  # requests in flight at most (open loop), and oha's connections
ON_TIME = 0.97  # achieved share of the offered rate that counts as on time


@dataclass(frozen=True)
class Row:
    """One open-loop measurement: the lab on N generators, or oha."""

    who: str
    offered: float
    sent_rps: float  # achieved arrival rate (lab); requests per second sent (oha)
    answered_rps: float
    dropped: int
    failed: int
    p99_ms: float
    cpu_pct: float  # the generators' CPU, 100 = one core (nan for oha)


def oha_path() -> str | None:
    found = shutil.which("oha") or str(Path.home() / ".cargo" / "bin" / "oha")
    return found if Path(found).exists() else None


def lab_open(url: str, rate: float, n: int, seconds: float, cpus: tuple[int, ...]) -> Row:
    load = {"duration_s": seconds, "timeout_s": 10.0, "rate_rps": rate, "max_outstanding": CAP}
    with tempfile.TemporaryDirectory() as tmp:
        done = pinned_step(url, TARGET_PATH, n, cpus, Path(tmp) / "loadgen.log", **load)
    fig = done.open_loop
    assert fig is not None
    failed = sum(done.errors.values()) + fig.unfinished
    answered = fig.ok_in_window / done.duration_s
    p99 = done.latency_ms.get("p99", float("nan"))
    who = f"lab, {n} generator{'s' if n > 1 else ''}"
    return Row(
        who, rate, fig.achieved_rate_rps, answered, fig.dropped, failed, p99, done.client_cpu_pct
    )


def oha_open(oha: str, url: str, rate: float, seconds: float, cpus: tuple[int, ...]) -> Row:
    argv = [oha, "-z", f"{seconds:g}s", "-q", f"{rate:g}", "-c", str(CAP), "--latency-correction"]
    argv += ["--no-tui", "--output-format", "json", url + TARGET_PATH]
    done = subprocess.run(
        procs.pinned(argv, cpus), capture_output=True, text=True, timeout=seconds + 60
    )
    out = json.loads(done.stdout)
    statuses = {k: int(v) for k, v in (out.get("statusCodeDistribution") or {}).items()}
    errors = sum(  # still in flight when -z ran out: not failures (the lab drains those)
        int(v) for k, v in (out.get("errorDistribution") or {}).items() if "deadline" not in k
    )
    ok = statuses.get("200", 0)
    failed = sum(statuses.values()) - ok + errors
    p99 = float((out.get("latencyPercentiles") or {}).get("p99") or "nan") * 1000
    sent = (sum(statuses.values()) + errors) / seconds
    return Row("oha -q", rate, sent, ok / seconds, 0, failed, p99, float("nan"))


def open_rows(
    url: str, args: argparse.Namespace, cpus: tuple[int, ...], oha: str | None
) -> list[Row]:
    rows = []
    for rate in args.rates:
        for n in args.generators:
            rows.append(lab_open(url, rate, n, args.seconds, cpus))
        if oha:
            rows.append(oha_open(oha, url, rate, args.seconds, cpus))
    return rows


def closed_ceiling(
    backend: NativeBackend, args: argparse.Namespace, cpus: tuple[int, ...]
) -> list[tuple[str, str, float, float]]:
    """(server, generator, req/s, client CPU %) at `--users` users, closed loop."""
    registry = load_registry(None)
    knobs = registry.knobs.updated({"workers": args.users}, "benchmark").resolve(args.users)
    upstream = backend.start_upstream(UpstreamSpec(delay_ms=10), procs.free_port())
    out = []
    try:
        for name in ("gunicorn-asyncio", "uwsgi-threads"):
            server = backend.start_server(
                registry.models[name], knobs, upstream.url, procs.free_port()
            )
            try:
                for n in args.generators:
                    done = closed(server.url, args, n, cpus)
                    out.append((name, f"lab, {n}", done.ok / done.duration_s, done.client_cpu_pct))
                if ensure_wrk():
                    rps, cpu = wrk(server.url, args.users, args.seconds, cpus, SERVER_PATH)
                    out.append((name, "wrk -t1", rps, cpu))
            finally:
                server.stop()
    finally:
        upstream.stop()
    return out


def closed(url: str, args: argparse.Namespace, n: int, cpus: tuple[int, ...]) -> Done:
    load = {"duration_s": args.seconds, "timeout_s": 30.0, "users": args.users}
    with tempfile.TemporaryDirectory() as tmp:
        return pinned_step(url, SERVER_PATH, n, cpus, Path(tmp) / "loadgen.log", **load)


def one_process_capacity(rows: list[Row]) -> tuple[float, float]:
    """The highest rate one lab generator offered on time (nothing dropped, its core under the
    saturation line), and its CPU per arrival (ms, median over the rates)."""
    ones = [r for r in rows if r.who == "lab, 1 generator"]
    kept = [
        r.offered
        for r in ones
        if r.sent_rps >= ON_TIME * r.offered
        and not r.dropped
        and r.cpu_pct < generators.SATURATED_PCT
    ]
    per_arrival = statistics.median([r.cpu_pct * 10 / r.offered for r in ones] or [0.0])
    return max(kept, default=0.0), per_arrival


OPEN_HEADERS = ["generator", "offered", "sent on time", "answered/s", "dropped", "failed"]
OPEN_HEADERS += ["p99 ms", "gen CPU %"]
CLOSED_HEADERS = ["server", "generator", "req/s", "client CPU %"]


def open_cells(rows: list[Row]) -> list[list[str]]:
    return [
        [
            r.who,
            f"{r.offered:,.0f}",
            f"{r.sent_rps:,.0f} ({r.sent_rps / r.offered:.0%})",
            f"{r.answered_rps:,.0f}",
            str(r.dropped),
            str(r.failed),
            f"{r.p99_ms:,.1f}",
            "-" if r.cpu_pct != r.cpu_pct else f"{r.cpu_pct:.0f}",
        ]
        for r in rows
    ]


def closed_cells(rows: list[tuple[str, str, float, float]]) -> list[list[str]]:
    return [[server, who, f"{rps:,.0f}", f"{cpu:.0f}"] for server, who, rps, cpu in rows]


def print_table(console: Console, headers: list[str], cells: list[list[str]], title: str) -> None:
    table = Table(title=title)
    for col in headers:
        table.add_column(col)
    for row in cells:
        table.add_row(*row)
    console.print(table)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rates", default="500,1000,2000")
    p.add_argument("--generators", default="1,2")
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--users", type=int, default=200, help="closed loop: users per step")
    p.add_argument(
        "--summary",
        type=Path,
        help="also write both tables as docs figure summaries: PATH and PATH with -closed",
    )
    args = p.parse_args()
    args.rates = [float(r) for r in args.rates.split(",")]
    args.generators = [int(n) for n in args.generators.split(",")]
    return args


def main() -> None:
    args = parse_args()
    started = time.time()
    console = Console()
    layout = pinned_split(console, "generators")
    oha = oha_path()
    if oha is None:
        console.print("oha not found (cargo install oha): its columns are skipped")
    with tempfile.TemporaryDirectory() as tmp:
        backend = NativeBackend(Path(tmp), layout)
        on_server = NativeBackend(Path(tmp), CpuLayout(client=layout.server))  # target's cores
        try:
            target = on_server.start_upstream(UpstreamSpec(delay_ms=10), procs.free_port())
            rows = open_rows(target.url, args, layout.client, oha)
            target.stop()
            ceiling = closed_ceiling(backend, args, layout.client)
        finally:
            backend.close()
            on_server.close()
    opened, closed_ = open_cells(rows), closed_cells(ceiling)
    title = f"open loop, {TARGET_PATH} on the upstream, {args.seconds:g} s"
    print_table(console, OPEN_HEADERS, opened, title)
    print_table(console, CLOSED_HEADERS, closed_, f"closed loop, {SERVER_PATH}, {args.users} users")
    if args.summary:
        kept = f"the script's printed tables ({args.seconds:g} s a row)"
        write_summary(args.summary, "open-loop-scale", OPEN_HEADERS, opened, kept, started)
        path = args.summary.with_name(args.summary.stem + "-closed.json")
        write_summary(path, "open-loop-scale", CLOSED_HEADERS, closed_, kept, started)
    top, per_arrival = one_process_capacity(rows)
    console.print(
        f"one generator process offered up to {top:,.0f} req/s on time under "
        f"{generators.SATURATED_PCT:.0f}% of its core, {per_arrival:.3f} ms CPU per arrival "
        f"(lab.run.generators.OPEN_RPS_PER_GENERATOR = {generators.OPEN_RPS_PER_GENERATOR:,.0f})"
    )


if __name__ == "__main__":
    main()
