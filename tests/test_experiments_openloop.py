"""Open-loop load (loadgen/open_loop.py) against the mock upstream: the arrival rate is the target,
and a server stall shows up in latencies measured from intended start (not in closed loop's)."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from experiments.common import child_env
from lab.backends.base import upstream_argv
from lab.run.generator import run_step
from lab.system.procs import Proc, free_port, start, wait_http
from loadgen.protocol import Done, Start

DELAY_MS = 10


@pytest.fixture
def upstream(tmp_path: Path) -> Iterator[tuple[Proc, str]]:
    port = free_port()
    argv = upstream_argv(port, "--delay-ms", str(DELAY_MS))
    proc = start("upstream", argv, log_path=tmp_path / "upstream.log", env=child_env())
    try:
        wait_http(proc, f"http://127.0.0.1:{port}/health", 20)
        yield proc, f"http://127.0.0.1:{port}"
    finally:
        proc.stop()


def step(start: Start, log: Path, stall: Proc | None = None) -> Done:
    """Run one load step; with `stall`, SIGSTOP that process for 1 s starting 1 s into the
    measured window (a real stall: the kernel still queues connections and requests)."""
    timers = (
        [
            threading.Timer(1.0, os.kill, (stall.pid, signal.SIGSTOP)),
            threading.Timer(2.0, os.kill, (stall.pid, signal.SIGCONT)),
        ]
        if stall is not None
        else []
    )
    try:
        return run_step(start, log, on_measuring=lambda _: [t.start() for t in timers])
    finally:
        for t in timers:
            t.join()


def spec(url: str, **kw: Any) -> Start:
    base = {
        "base_url": url,
        "path": f"/delay?ms={DELAY_MS}",
        "users": 2,
        "settle_s": 1.0,
        "duration_s": 4.0,
        "timeout_s": 10.0,
    }
    return Start(**{**base, **kw})


def test_achieved_arrival_rate_is_the_target(upstream: tuple[Proc, str], tmp_path: Path) -> None:
    _, url = upstream
    r = step(spec(url, users=0, max_outstanding=200, rate_rps=200.0), tmp_path / "gen.log")
    assert r.open_loop is not None
    assert r.open_loop.achieved_rate_rps == pytest.approx(200.0, rel=0.02)
    assert r.open_loop.dropped == 0
    assert r.ok > 0 and not r.errors


def test_stall_counts_from_intended_start_in_open_loop_only(
    upstream: tuple[Proc, str], tmp_path: Path
) -> None:
    proc, url = upstream
    log = tmp_path / "gen.log"
    open_ = step(spec(url, users=0, max_outstanding=500, rate_rps=100.0), log, proc)
    closed = step(spec(url, users=2), log, proc)
    # the ~100 requests due during the stall waited for it: a tenth of the window's samples
    assert open_.latency_ms["p90"] >= 300
    # closed loop: 2 users, so only the 2 requests in flight saw it; percentiles hide it
    assert closed.latency_ms["max"] >= 900
    assert closed.latency_ms["p90"] < 300


def test_cap_turns_overload_into_drops(upstream: tuple[Proc, str], tmp_path: Path) -> None:
    _, url = upstream
    # 5 outstanding at most, each taking >= 10 ms: at most ~500 rps can start, 1000 are due
    start = spec(url, users=0, max_outstanding=5, rate_rps=1000.0, duration_s=2.0)
    r = step(start, tmp_path / "gen.log").open_loop
    assert r is not None and r.dropped > 0
    assert r.sent + r.dropped == pytest.approx(2000, rel=0.05)
