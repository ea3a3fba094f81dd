"""Stalls named at the scale they happen, and a server that waited for a CPU never "cause not
found".

Pauses: the answers per 100 ms of generated steps, each pause put in by the test (the oracle is
where the test put it, not the production function), and a real app that pauses under gevent
(a blocking call stops its event loop) and under threads (a lock convoy) for 0.3 and 1 s, with
the lab's generator, and at 2 users, where the bins are too thin and the requests held through
a pause tell it. The 5 s case, too long for CI, is `benchmarks/pauses.py`. CPU waits:
generated records whose server waited a third of the window or more, below the ideal.
"""

from __future__ import annotations

import random
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import psutil
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lab.record.step import Sampled, StepKey, StepRecord, amended, step_record
from lab.record.thresholds import T
from lab.system import tools
from lab.verdict.assess import assessed
from lab.verdict.capacity import Capacity
from lab.verdict.pauses import pauses_of
from tests.fixture_run import window
from tests.labrun import LabRun
from tests.pausing_server import paused_record

D_MS = 20.0


def capacity(delay_ms: float = D_MS) -> Capacity:
    return Capacity(1000, "1000 threads x 1 process", 1.0, delay_ms, 64_000, host_cores=2)


def ticked(ticks: list[int], *, max_ms: float = 5000.0, **sampled: Any) -> StepRecord:
    """A closed-loop step of 20 users whose answers per 100 ms are `ticks`, assessed."""
    seconds = len(ticks) / 10
    rps = sum(ticks) / seconds
    latency = {"p50": D_MS, "p99": max_ms / 2, "max": max_ms}
    measured = window(rps, D_MS, seconds=seconds, latency_ms=latency, answers_100ms=tuple(ticks))
    figures = Sampled(**{"server_cpu_pct": 30.0, "server_rss_mb": 60, **sampled})
    return assessed(
        step_record("run", StepKey("m", "closed", 20, None, 1), measured, figures), capacity()
    )


def steady(n: int, per_bin: int, rng: random.Random) -> list[int]:
    """`n` bins of about `per_bin` answers (within 30%)."""
    return [max(1, round(per_bin * rng.uniform(0.7, 1.3))) for _ in range(n)]


@settings(max_examples=60, deadline=None)
@given(
    per_bin=st.integers(10, 60),
    pauses=st.lists(st.integers(3, 15), min_size=1, max_size=3),
    gap=st.integers(6, 20),
    seed=st.integers(0, 2**16),
)
def test_every_pause_put_in_is_found_with_its_length(
    per_bin: int, pauses: list[int], gap: int, seed: int
) -> None:
    """Pauses of 300 ms to 1.5 s put into a steady series: each found once, at the bin where
    it was put, its length within one bin of the truth; their period is the gap between them."""
    rng = random.Random(seed)
    ticks, truth = steady(gap, per_bin, rng), []
    for bins in pauses:
        truth.append((len(ticks) / 10, bins * 100))
        ticks += [0] * bins + steady(gap, per_bin, rng)
    found = pauses_of(ticked(ticks), D_MS)
    assert [p.start_s for p in found] == [start for start, _ in truth]
    for p, (_, ms) in zip(found, truth, strict=True):
        assert ms <= p.length_ms <= ms + 100
    record = ticked(ticks)
    assert record.evidence.limited_by == "pause", record.evidence.limit_reason
    ev = record.evidence.details["paused"]
    assert ev["count"] == len(pauses) and ev["lengths_ms"] == [p.length_ms for p in found]
    if len(pauses) >= 2:
        starts = [start for start, _ in truth]
        gaps = [b - a for a, b in zip(starts, starts[1:], strict=False)]
        # one or two gaps: their median is their mean
        assert ev["period_s"] == pytest.approx(sum(gaps) / len(gaps), abs=0.051)
        assert f"about every {ev['period_s']:g} s" in record.evidence.limit_reason


@settings(max_examples=60, deadline=None)
@given(per_bin=st.integers(10, 60), n=st.integers(20, 200), seed=st.integers(0, 2**16))
def test_a_steady_series_has_no_pause(per_bin: int, n: int, seed: int) -> None:
    assert pauses_of(ticked(steady(n, per_bin, random.Random(seed))), D_MS) == ()


@pytest.mark.parametrize(
    ("quiet_bins", "delay_ms", "found"),
    [(1, 20.0, False), (3, 20.0, True), (3, 100.0, False), (5, 100.0, True)],
    ids=["100ms-under-200ms", "300ms", "300ms-under-4d", "500ms-over-4d"],
)
def test_a_pause_counts_from_4d_or_200ms(quiet_bins: int, delay_ms: float, found: bool) -> None:
    ticks = [30] * 20 + [0] * quiet_bins + [30] * 20
    assert bool(pauses_of(ticked(ticks), delay_ms)) is found


def test_a_quiet_stretch_is_no_pause_where_no_request_waited_or_the_generator_stalled() -> None:
    ticks = [30] * 20 + [0] * 5 + [30] * 20
    assert pauses_of(ticked(ticks, max_ms=100.0), D_MS) == ()  # nobody waited through it
    lagged = replace(ticked(ticks), timeseries={"lag_max_ms": [0.0, 0.0, 450.0, 0.0, 0.0]})
    assert pauses_of(lagged, D_MS) == ()
    assert pauses_of(amended(ticked(ticks), answers_100ms=()), D_MS) == ()  # an older record


NAMES = st.dictionaries(
    st.from_regex(r"[a-z]{2,8} \([0-9]{2,5}\)", fullmatch=True),
    st.floats(10, 100).map(round).map(float),
    max_size=3,
)


@settings(max_examples=150, deadline=None)
@given(
    wait=st.floats(T.server_wait_named_pct, 400),
    cpu=st.floats(0, 100),
    host=st.floats(0, 200),
    rps=st.floats(1, 790),
    others=NAMES,
    host_busy=st.booleans(),
)
def test_a_server_that_waited_a_third_of_the_window_is_never_cause_not_found(
    wait: float, cpu: float, host: float, rps: float, others: dict[str, float], host_busy: bool
) -> None:
    """Below the ideal (1000 users / 20 ms), the server waiting for a CPU a third of the window
    or more: the limit is named, and every process outside the run seen on its cores is named
    in the reasons (the limit's or a secondary one's)."""
    raised = {"host_busy": "other processes used 80% of a core"} if host_busy else {}
    record = ticked([round(rps / 10)] * 100, server_cpu_pct=cpu, server_wait_pct=wait)
    record = amended(record, host_cpu_pct=host, others_on_cores=others, users=1000)
    record = amended(
        record,
        flags=(*record.evidence.flags, *raised),
        details={**record.evidence.details, **raised},
    )
    judged = assessed(record, capacity())
    assert judged.evidence.limited_by != "unknown", judged.evidence.limit_reason
    said = [
        judged.evidence.limit_reason,
        *(x["reason"] for x in judged.evidence.details.get("also_limited_by", [])),
    ]
    for name in others:
        assert any(name in reason for reason in said), (name, said)


@pytest.mark.parametrize("kind", ["gevent", "threads"], ids=["gevent", "threads"])
@pytest.mark.parametrize(
    ("pause_s", "every_s", "window_s"),
    [(0.3, 1.2, 3.0), (1.0, 9.0, 2.5)],
    ids=["0.3s-every-1.2s", "1s-once"],
)
def test_a_real_app_s_pauses_are_named_with_count_length_and_period(
    tmp_path: Path, kind: str, pause_s: float, every_s: float, window_s: float
) -> None:
    """A real app pausing under gevent or threads, measured by the lab's generator: the step's
    limit is the pause (or it is secondary evidence), its count, length and period in the flag's
    evidence, its length the pause's within 100 ms either way."""
    record = paused_record(kind, pause_s, every_s, window_s, tmp_path)
    assert record.load.answers_100ms and len(record.load.answers_100ms) == int(window_s * 10)
    assert "pause" in (record.evidence.limited_by, *record.evidence.also_limited_by), (
        record.evidence.limit_reason
    )
    found = pauses_of(record, D_MS / 2)
    expected = 2 if every_s < window_s - 0.5 else 1
    assert len(found) >= expected, (found, record.load.answers_100ms)
    for p in found:
        assert pause_s * 1000 - 100 <= p.length_ms <= pause_s * 1000 + 150, found
    if record.evidence.limited_by == "pause":
        ev = record.evidence.details["paused"]
        assert ev["count"] == len(found)
        if expected > 1:
            assert ev["period_s"] == pytest.approx(every_s, abs=0.2)


@pytest.mark.parametrize("kind", ["gevent", "threads"], ids=["gevent", "threads"])
def test_a_pause_at_two_users_too_thin_for_the_bins_is_found_from_its_held_requests(
    tmp_path: Path, kind: str
) -> None:
    """The same app at 2 users, each request 100 ms (about 2 answers per 100 ms, fewer than a
    400 ms pause needs to be told from chance there), pausing 1 s every 2 s in a 4 s window: the
    two requests each pause holds answer far above the rest, so both pauses are named with
    their length and period."""
    record = paused_record(
        "gevent" if kind == "gevent" else "threads", 1.0, 2.0, 4.0, tmp_path, service_s=0.1, users=2
    )
    ticks = sorted(n for n in record.load.answers_100ms if n)
    assert ticks[len(ticks) // 2] * 4 < T.pause_min_expected_answers, record.load.answers_100ms
    assert "pause" in (record.evidence.limited_by, *record.evidence.also_limited_by), (
        record.evidence.limit_reason
    )
    found = pauses_of(record, 100.0)
    assert [p.seen for p in found] == ["held", "held"], (found, record.load.answers_by_latency)
    for p in found:
        assert 900 <= p.length_ms <= 1150, found
    if record.evidence.limited_by == "pause":
        ev = record.evidence.details["paused"]
        assert ev["count"] == 2 and ev["held"] >= 3, ev
        assert ev["period_s"] == pytest.approx(2.0, abs=0.2)


@pytest.mark.skipif(tools.missing() is not None, reason="oha is not installed")
def test_oha_s_answers_per_100ms_show_the_same_pause(tmp_path: Path) -> None:
    """The same app paused 0.5 s under threads, in open loop at 300 req/s on oha: its per-request
    records fill the same 100 ms series, and the pause is found at its length."""
    load = {"engine": "oha", "engine_path": tools.binary() or "", "rate_rps": 300.0}
    record = paused_record("threads", 0.5, 9.0, 2.0, tmp_path, max_outstanding=50, **load)
    assert len(record.load.answers_100ms) == 20 and sum(record.load.answers_100ms) > 0
    (found,) = pauses_of(record, D_MS / 2)
    assert 400 <= found.length_ms <= 650, (found, record.load.answers_100ms)


def test_two_busy_loops_on_the_server_s_core_are_named(tmp_path: Path) -> None:
    """The real case: gunicorn gevent at 100 users, two busy loops pinned on the server's cores
    from half a second into the window: the server waits for its CPU, and the step's reasons name
    both loops by pid (never "cause not found")."""
    model = "gunicorn-gevent"
    args = ("--models", model, "--levels", "100", "--duration", "4", "--warmup", "0")
    run = LabRun(tmp_path, *args, "--delay-ms", "20")
    loops: list[subprocess.Popen[bytes]] = []
    try:
        server = run.wait_measuring(model, 0)
        cores = psutil.Process(server.pid).cpu_affinity()
        for _ in range(2):
            loop = subprocess.Popen([sys.executable, "-c", "while True: pass"])
            psutil.Process(loop.pid).cpu_affinity(cores)
            loops.append(loop)
        assert run.finish() == 0, run.output()
    finally:
        for loop in loops:
            loop.kill()
        run.kill()
    (step,) = run.steps()
    assert step["limited_by"] != "unknown", step["limit_reason"]
    said = [
        step["limit_reason"],
        *(x["reason"] for x in step["details"].get("also_limited_by", [])),
    ]
    for loop in loops:
        assert any(f"({loop.pid})" in reason for reason in said), (
            loop.pid,
            said,
            step["others_on_cores"],
        )
