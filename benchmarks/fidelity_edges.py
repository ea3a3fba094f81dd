"""Benchmark (not a test): the lab beside oha where the answer matters most.

`benchmarks/latency_fidelity.py --edges` runs it. Two cases, each in alternating rounds on the
same client cores:

- a server that sheds load (`tests.shedding_server`: 503 at once beyond `--shed-limit` requests
  in flight, 10 ms otherwise) at 50 users: oha times every response, 503s included; the lab's p99
  over the answers alone would flatter the server, its p99 over every request should match oha's,
  and `failed_tail` (the verdict's rule) keeps the step out of p99 rankings;
- a generator paused (SIGSTOP) `--pause-ms` once a second against gunicorn-asyncio's
  `/sleep?ms=10` at 10 users: oha is not paused; the lab's p99 moves, and the step should carry
  `generator_lag` (or `generator_lag_extremes` where only p99.9 or the max could move).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil
from rich.console import Console
from rich.table import Table

from lab.backends.base import CpuLayout, NativeBackend
from lab.config.models import load_registry
from lab.config.scenario import UpstreamSpec
from lab.record.step import StepKey, step_record
from lab.run.apparatus import generator_lag
from lab.run.generator import measured_from, run_step
from lab.system import procs
from lab.verdict.assess import assessed
from lab.verdict.capacity import Capacity
from loadgen.protocol import Start

ROOT = Path(__file__).resolve().parent.parent
HEADERS = ["case", "tool", "p99 ms (answers)", "p99 ms (every request)", "unanswered %"]
HEADERS += ["gen. touched % (p99)", "flags"]


def lab_row(
    url: str,
    route: str,
    users: int,
    args: argparse.Namespace,
    pause_ms: float,
    cpus: tuple[int, ...],
) -> list[str]:
    """One lab step (paused `pause_ms` once a second if > 0): its figures and flags."""
    start = Start(url, route, 1.0, args.seconds, 30.0, users=users)
    with tempfile.TemporaryDirectory() as tmp, _paused(pause_ms):
        done = run_step(start, Path(tmp) / "lab.log", cpus=cpus)
    measured = measured_from(done)
    key = StepKey("m", "closed", users, None, 1)
    record = step_record("bench", key, measured, raised=tuple(generator_lag(measured)))
    rec = assessed(record, Capacity(200, "200 x 1", 1.0, 10.0, 24_000))  # the verdict's flags
    every = rec.latency.latency_all_ms.get("p99", float("nan"))
    touched = 100 * rec.evidence.generator_touched.get("p99", float("nan"))
    return [
        "",
        "lab",
        f"{rec.latency.latency_ms['p99']:.1f}",
        f"{every:.1f}",
        f"{100 * rec.latency.unanswered_share:.1f}",
        f"{touched:.2f}",
        ", ".join(rec.evidence.flags),
    ]


def oha_row(oha: str, url: str, users: int, seconds: float, cpus: tuple[int, ...]) -> list[str]:
    argv = [oha, "--no-tui", "--output-format", "json", "-z", f"{round(seconds)}s"]
    argv = procs.pinned([*argv, "-c", str(users), url], cpus)
    out = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 60, check=False)
    report = json.loads(out.stdout)
    codes = report.get("statusCodeDistribution", {})
    total = sum(codes.values()) or 1
    failed = 100 * sum(v for k, v in codes.items() if not k.startswith("2")) / total
    p99 = report["latencyPercentiles"]["p99"] * 1000
    return ["", "oha", "", f"{p99:.1f}", f"{failed:.1f}", "", ""]


@contextmanager
def _paused(pause_ms: float) -> Iterator[None]:
    """Stop this process's load generator `pause_ms` once a second (0: never)."""
    stop = threading.Event()
    thread = threading.Thread(target=_pause, args=(pause_ms, stop), daemon=True)
    if pause_ms > 0:
        thread.start()
    try:
        yield
    finally:
        stop.set()
        if pause_ms > 0:
            thread.join(timeout=5)


def _pause(pause_ms: float, stop: threading.Event) -> None:
    gen = None
    while gen is None and not stop.is_set():
        kids = psutil.Process().children(recursive=True)
        gen = next((p for p in kids if "loadgen" in " ".join(p.cmdline())), None)
        time.sleep(0.05)
    while gen is not None and not stop.wait(1.0 - pause_ms / 1000):
        try:
            os.kill(gen.pid, signal.SIGSTOP)
            time.sleep(pause_ms / 1000)
            os.kill(gen.pid, signal.SIGCONT)
        except ProcessLookupError:
            return


def _median_rows(rows: list[list[str]]) -> list[str]:
    """The rounds' median of each numeric cell; text cells (flags) as a set."""
    out = []
    for cells in zip(*rows, strict=True):
        try:
            out.append(f"{statistics.median(float(c) for c in cells):.1f}")
        except ValueError:
            out.append(" | ".join(dict.fromkeys(c for c in cells if c)))
    return out


def edges(args: argparse.Namespace, oha: str | None) -> None:
    console = Console(width=150)
    if oha is None:
        console.print("oha is not installed (`cargo install oha`): nothing to compare with")
        return
    layout = CpuLayout.split(pin=True)
    port = procs.free_port()
    shed_argv = [sys.executable, "-m", "tests.shedding_server", str(port)]
    shed_argv += [str(args.shed_limit), "10"]
    shedder = subprocess.Popen(procs.pinned(shed_argv, layout.server), cwd=ROOT)
    body: list[list[str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        backend = NativeBackend(Path(tmp), layout)
        try:
            upstream = backend.start_upstream(UpstreamSpec(delay_ms=10), procs.free_port())
            registry = load_registry(None)
            model = registry.models["gunicorn-asyncio"]
            server = backend.start_server(
                model, registry.knobs.resolve(200), upstream.url, procs.free_port()
            )
            time.sleep(0.5)
            shed_url = f"http://127.0.0.1:{port}"
            cases = [
                (f"sheds beyond {args.shed_limit}, 50 users", shed_url, "/", 50, 0.0),
                (
                    f"paused {args.pause_ms:g} ms/s, 10 users",
                    server.url,
                    "/sleep?ms=10",
                    10,
                    args.pause_ms,
                ),
                ("not paused, 10 users", server.url, "/sleep?ms=10", 10, 0.0),
            ]
            for label, url, route, users, pause in cases:
                ours, theirs = [], []
                for _ in range(args.rounds):
                    ours.append(lab_row(url, route, users, args, pause, layout.client))
                    theirs.append(oha_row(oha, url + route, users, args.seconds, layout.client))
                body += [[label, *_median_rows(ours)[1:]], _median_rows(theirs)]
        finally:
            backend.close()
            shedder.kill()
    table = Table(title="the lab beside oha at the edges (medians of rounds)")
    for col in HEADERS:
        table.add_column(col)
    for row in body:
        table.add_row(*row)
    console.print(table)
