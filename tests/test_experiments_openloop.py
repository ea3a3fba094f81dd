"""Open-loop load (loadgen/openloop.py) against the mock upstream: the arrival rate is the target,
and a server stall shows up in latencies measured from intended start (not in closed loop's)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from experiments.common import child_env
from lab.procs import Proc, free_port, start, wait_http

DELAY_MS = 10


@pytest.fixture
def upstream(tmp_path: Path) -> Iterator[tuple[Proc, str]]:
    port = free_port()
    proc = start(
        "upstream",
        [
            sys.executable,
            "-m",
            "servers.upstream",
            "--port",
            str(port),
            "--delay-ms",
            str(DELAY_MS),
        ],
        log_path=tmp_path / "upstream.log",
        env=child_env(),
    )
    try:
        wait_http(proc, f"http://127.0.0.1:{port}/health", 20)
        yield proc, f"http://127.0.0.1:{port}"
    finally:
        proc.stop()


def step(module: str, spec: dict[str, Any], stall: Proc | None = None) -> dict[str, Any]:
    """Run one load step; with `stall`, SIGSTOP that process for 1 s starting 1 s into the
    measured window (a real stall: the kernel still queues connections and requests)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", module, json.dumps(spec)],
        env=child_env(),
        stdout=subprocess.PIPE,
        text=True,
    )
    timers = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            msg = json.loads(line)
            if msg["type"] == "measure" and stall is not None:
                timers = [
                    threading.Timer(1.0, os.kill, (stall.pid, signal.SIGSTOP)),
                    threading.Timer(2.0, os.kill, (stall.pid, signal.SIGCONT)),
                ]
                for t in timers:
                    t.start()
            if msg["type"] == "result":
                return msg
        raise AssertionError("no result line")
    finally:
        for t in timers:
            t.join()
        proc.wait(timeout=30)


def spec(url: str, **kw: Any) -> dict[str, Any]:
    """A loadgen.worker StepSpec as JSON (not imported: importing loadgen.worker patches)."""
    base = {
        "base_url": url,
        "path": f"/delay?ms={DELAY_MS}",
        "users": 2,
        "settle_s": 1.0,
        "duration_s": 4.0,
        "timeout_s": 10.0,
    }
    return {**base, **kw}


def test_achieved_arrival_rate_is_the_target(upstream: tuple[Proc, str]) -> None:
    _, url = upstream
    r = step("loadgen.openloop", spec(url, mode="open", users=200, rate_rps=200.0))
    assert r["achieved_rate_rps"] == pytest.approx(200.0, rel=0.02)
    assert r["dropped"] == 0
    assert r["ok"] > 0 and not r["errors"]


def test_stall_counts_from_intended_start_in_open_loop_only(upstream: tuple[Proc, str]) -> None:
    proc, url = upstream
    open_ = step("loadgen.openloop", spec(url, mode="open", users=500, rate_rps=100.0), proc)
    closed = step("loadgen.worker", spec(url, users=2), proc)
    # the ~100 requests due during the stall waited for it: a tenth of the window's samples
    assert open_["latency_ms"]["p90"] >= 300
    # closed loop: 2 users, so only the 2 requests in flight saw it; percentiles hide it
    assert closed["latency_ms"]["max"] >= 900
    assert closed["latency_ms"]["p90"] < 300


def test_cap_turns_overload_into_drops(upstream: tuple[Proc, str]) -> None:
    _, url = upstream
    # 5 outstanding at most, each taking >= 10 ms: at most ~500 rps can start, 1000 are due
    r = step("loadgen.openloop", spec(url, mode="open", users=5, rate_rps=1000.0, duration_s=2.0))
    assert r["dropped"] > 0
    assert r["sent"] + r["dropped"] == pytest.approx(2000, rel=0.05)
