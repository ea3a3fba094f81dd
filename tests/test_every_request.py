"""Every request counted: failures, drops and the generator's own stalls in the record.

Real generator processes against a real server on loopback (`tests.shedding_server`, which
answers 503 at once beyond a few requests in flight); the generator's stalls are real too: the
test stops its process (SIGSTOP) for a few milliseconds several times a second.
"""

from __future__ import annotations

import math
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from analysis.judge import judge
from analysis.points import build
from lab.record import counted, hist
from lab.record.step import StepKey, StepRecord, step_record
from lab.run.apparatus import generator_lag
from lab.run.generator import measured_from, run_step
from lab.verdict.assess import assessed
from lab.verdict.capacity import Capacity
from loadgen.protocol import Done, Start
from tests.fakeservers import shedder
from tests.helpers import record, striking


@pytest.fixture()
def shedding() -> Iterator[str]:
    """A server that holds 4 requests for 20 ms each and refuses the rest at once."""
    yield from shedder(limit=4, delay_ms=20)


@pytest.fixture()
def calm() -> Iterator[str]:
    """The same server with room for every request: each answered after 10 ms."""
    yield from shedder(limit=10_000, delay_ms=10)


def _record(model: str, done: Done, mode: str = "closed") -> StepRecord:
    """The step record as a run makes it: flags from the figures, then the verdict's rules."""
    measured = measured_from(done)
    key = StepKey(model, mode, 16 if mode == "closed" else None, None, 1)
    record = step_record("run", key, measured, raised=tuple(generator_lag(measured)))
    return assessed(record, Capacity(200, "200 coroutines x 1 process", 1.0, 20.0, 24_000))


def test_a_server_that_sheds_load_is_timed_and_never_crowned_on_p99(
    shedding: str, tmp_path: Path
) -> None:
    done = run_step(Start(shedding, "/", 0.5, 2.0, 10.0, users=16), tmp_path / "gen.log")
    assert done.errors.get("http_5xx", 0) > done.ok  # most requests were refused ...
    refused = done.failed_latency_ms["http_5xx"]
    assert 0 < refused["p50"] < done.latency_ms["p50"]  # ... fast, and their latency is kept
    assert done.all_latency_ms["p50"] < done.latency_ms["p50"]
    shed = _record("shedder", done)
    assert "failed_tail" in shed.evidence.flags and shed.latency.unanswered_hides == ("p99", "p999")
    assert (
        shed.latency.unanswered_share > 0.5 and shed.latency.latency_all_ms == done.all_latency_ms
    )
    honest = record("honest", 1000.0, users=16, p99=500.0)  # slower, every request answered
    (ranking,) = judge(build([shed, honest]))
    assert ranking.best_p99 == ("honest",)


def test_dropped_arrivals_are_lower_bounds_in_the_record(shedding: str, tmp_path: Path) -> None:
    """Open loop with a cap of 2 on a 20 ms server (100 req/s at most) offered 300 req/s: the
    arrivals the cap kept back are timed to the next free slot, and marked as lower bounds."""
    start = Start(shedding, "/", 0.5, 2.0, 10.0, rate_rps=300.0, max_outstanding=2)
    done = run_step(start, tmp_path / "gen.log")
    assert done.open_loop is not None and done.open_loop.dropped > 0
    assert done.failed_latency_ms["dropped"]["p50"] > 0
    assert "p99" in done.open_loop.all_lower_bounds
    rec = _record("capped", done, "open")
    assert rec.latency.unanswered_share > 0.5 and "failed_tail" in rec.evidence.flags
    assert rec.latency.latency_all_lower_bounds == tuple(done.open_loop.all_lower_bounds)


def _pause(stop_ms: float, every_s: float, until: threading.Event) -> None:
    """Stop this test's generator process for `stop_ms` every `every_s`."""
    gen = None
    while gen is None and not until.is_set():
        kids = psutil.Process().children(recursive=True)
        gen = next((p for p in kids if "loadgen" in " ".join(p.cmdline())), None)
        time.sleep(0.05)
    while gen is not None and not until.is_set():
        try:
            os.kill(gen.pid, signal.SIGSTOP)
            time.sleep(stop_ms / 1000)
            os.kill(gen.pid, signal.SIGCONT)
        except ProcessLookupError:
            return
        time.sleep(every_s)


def test_a_generator_paused_briefly_and_often_is_flagged(calm: str, tmp_path: Path) -> None:
    """Pauses of 8 ms ten times a second: the loop's lag p99 over time stays near the old 3 ms
    floor, but they delay more than 1% of the answers by more than 15% of a ~12 ms p99."""
    with striking(_pause, 8.0, 0.1, join_s=5):
        done = run_step(Start(calm, "/", 0.5, 3.0, 10.0, users=10), tmp_path / "gen.log")
    rec = _record("paused", done)
    assert "p99" in rec.evidence.generator_moved, rec.evidence.generator_touched
    assert "generator_lag" in rec.evidence.flags and rec.evidence.generator_touched["p99"] > 0.01


@pytest.mark.parametrize(
    ("share", "hides"),
    [(0.0, ()), (0.005, ("p999",)), (0.02, ("p99", "p999")), (0.0009, ())],
    ids=["none", "half-percent", "two-percent", "under-p999"],
)
def test_the_unanswered_share_hides_the_percentiles_it_can_set(
    share: float, hides: tuple[str, ...]
) -> None:
    assert counted.hidden_by(share) == hides


@pytest.mark.parametrize(
    ("late_ms", "late_ticks", "moved"),
    [
        (1.2, 50, ()),
        (3.5, 1, ("max",)),
        (3.0, 5, ("p999", "max")),
        (3.0, 15, ("p99", "p999", "max")),
    ],
    ids=["jitter-under-budget", "one-stall", "rare-stalls", "frequent-stalls"],
)
def test_the_generators_stalls_are_counted_per_request(
    late_ms: float, late_ticks: int, moved: tuple[str, ...]
) -> None:
    """1,000 loop-lag ticks, some late; a p99 of 12 ms has a budget of 1.8 ms."""
    lag = hist.new_histogram()
    for _ in range(1000 - late_ticks):
        hist.record_ms(lag, 0.2)
    for _ in range(late_ticks):
        hist.record_ms(lag, late_ms)
    latency = {"p99": 12.0, "p999": 19.0, "max": 20.0}
    shares = counted.touched_shares((hist.encode(lag), ""), 5000, latency)
    assert counted.moved_by_stalls(shares) == moved


def test_the_drain_is_no_second_and_a_silent_second_has_no_p99(tmp_path: Path) -> None:
    """A server that accepts and never answers: no second has an answer, so none has a p99
    (not 0 ms); the drain's interval (every request's age at the cut-off) is tagged, kept in
    the step's latency and out of its seconds."""
    hole = socket.create_server(("127.0.0.1", 0), backlog=512)  # the kernel accepts; no one reads
    url = f"http://127.0.0.1:{hole.getsockname()[1]}"
    # a timeout beyond the drain's longest wait (loadgen.recording.DRAIN_MAX_S, 10 s; importing
    # it here would import locust, which monkey-patches this process): unanswered at the cut-off
    start = Start(url, "/", 0.3, 1.0, 12.0, rate_rps=20.0, max_outstanding=100)
    seen: list[tuple[float, float, str | None]] = []
    try:
        done = run_step(
            start,
            tmp_path / "gen.log",
            on_histogram=lambda a, b, h: seen.append((a, b, h.get_tag())),
        )
    finally:
        hole.close()
    p99s = done.timeseries["p99_ms"]
    assert p99s and all(math.isnan(p) for p in p99s), p99s
    tags = [tag for _, _, tag in seen]
    assert tags[-1] == hist.DRAIN_TAG and tags.count(hist.DRAIN_TAG) == 1
    assert len(tags) - 1 == len(p99s)  # every other interval is a measured second
    assert done.open_loop is not None and done.open_loop.unfinished > 0
    assert "mean" in done.open_loop.lower_bounds  # every bound pulls the mean down too


@pytest.mark.parametrize(
    "load",
    [{"users": 4}, {"rate_rps": 20.0, "max_outstanding": 100}],
    ids=["closed-loop", "open-loop"],
)
def test_a_request_that_times_out_is_one_timeout_never_retried(
    load: dict[str, Any], tmp_path: Path
) -> None:
    """A server that accepts and never answers: each request is one timeout, timed at the step's
    timeout (an HTTP client's silent retries would make it a multiple, or no record at all)."""
    hole = socket.create_server(("127.0.0.1", 0), backlog=512)
    url = f"http://127.0.0.1:{hole.getsockname()[1]}"
    try:
        done = run_step(Start(url, "/", 0.3, 2.5, 0.5, **load), tmp_path / "gen.log")
    finally:
        hole.close()
    assert done.ok == 0 and done.errors.get("timeout", 0) > 0, done.errors
    assert 450 <= done.failed_latency_ms["timeout"]["max"] < 900, done.failed_latency_ms
