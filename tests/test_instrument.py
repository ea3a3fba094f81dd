"""The instrument measured like the server: the generators' own loop lag, its flag and its rankings.

Real generator processes against real servers on loopback; the stall is real too: the test stops
the generator process (SIGSTOP) for a tenth of a second at a time, as a blocked event loop would.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from analysis.differences import crossovers
from analysis.instrument import instrument_lines
from analysis.judge import judge
from analysis.loading import load
from analysis.metrics import point_table
from analysis.points import build
from lab.backends.base import LocalServer
from lab.record.step import Measured, StepKey, amended, step_record
from lab.run.apparatus import generator_lag
from lab.run.generator import run_step
from tests.fixture_run import FixtureStep, build_run
from tests.helpers import record, striking, two_models
from tests.labrun import LabRun

LAG_KEYS = {"p50", "p99", "max", "mean"}


def measured(lag_p99: float, p99: float) -> Measured:
    return Measured(
        started_at="2026-01-01T00:00:00+00:00",
        duration_s=5.0,
        requests=5000,
        ok=5000,
        latency_ms={"p50": p99 / 2, "p99": p99},
        generator_lag_ms={"p50": 0.1, "p99": lag_p99, "max": lag_p99 * 2, "mean": 0.2},
        generator_periodic_pct=0.2,
    )


@pytest.mark.parametrize(
    ("lag_p99", "p99", "flagged"),
    [
        (1.6, 14.0, False),  # a healthy step at 10 ms: the benchmark's figures
        (2.9, 10.0, False),  # under the 3 ms floor
        (3.5, 12.0, True),  # over 3 ms and 15% of a short p99
        (15.0, 130.0, False),  # 100 ms delay: 15% of 130 ms is 19.5 ms
        (25.0, 130.0, True),
        (0.0, 0.0, False),  # nothing measured
    ],
    ids=["healthy", "under-floor", "short-p99", "long-p99-within", "long-p99-over", "empty"],
)
def test_the_lag_rule(lag_p99: float, p99: float, flagged: bool) -> None:
    raised = generator_lag(measured(lag_p99, p99))
    assert bool(raised) is flagged
    if raised:
        assert raised[0].flag == "generator_lag"
        assert raised[0].evidence["lag_p99_ms"] == lag_p99


def test_a_lagged_step_is_never_crowned_on_p99_but_counts_on_throughput() -> None:
    lagged = step_record(
        "run",
        StepKey("fast", "closed", 10, None, 1),
        measured(40.0, 50.0),
        raised=tuple(generator_lag(measured(40.0, 50.0))),
    )
    slow = record("slow", 150.0, p99=200.0)
    (ranking,) = judge(build([lagged, slow]))
    assert ranking.best_p99 == ("slow",)
    assert ranking.best_rps == ("fast",)
    assert not ranking.excluded
    assert any("generator's own stalls" in n for n in ranking.notes)


def test_a_lagged_point_makes_no_p99_crossover(tmp_path: Path) -> None:
    run = load(two_models(tmp_path, b_flags=("generator_lag",)))
    table = point_table(run)
    found = crossovers(table, run.points)
    assert set(found["metric"]) == {"rps"}  # b's lower p99 at c=10 is the generator's, maybe
    assert table["fair"].all() and not table[table["model"] == "b"]["fair_p99"].any()


def test_the_summary_names_the_instrument(tmp_path: Path) -> None:
    steps = [FixtureStep("a", c, 1, (100.0,) * 3, (20.0,)) for c in (1, 10)]
    run = load(build_run(tmp_path, steps))
    lagged = amended(
        run.records[0],
        generator_lag_ms={"p50": 0.1, "p99": 9.0, "max": 80.0, "mean": 0.3},
        generator_periodic_pct=0.25,
        flags=("generator_lag",),
    )
    lines = instrument_lines([lagged, run.records[1]])
    assert lines[0].startswith("the instrument: the generator's event loop woke 9.0-9.0 ms")
    assert "longest stall 80 ms" in lines[0] and "0.25%" in lines[0]
    assert lines[1].startswith("generator_lag on 1 step(s)") and "a 1 user" in lines[1]


def test_each_generator_process_reports_its_loop_lag(upstream: LocalServer, tmp_path: Path) -> None:
    """One process and two (a locust master and its workers): the step, each part and each
    second carry the lag; an idle-enough generator's is small."""
    from loadgen.protocol import Start

    for n in (1, 2):
        start = Start(upstream.url, "/health", 0.5, 2.0, 10.0, users=4, generators=n)
        done = run_step(start, tmp_path / f"gen{n}.log")
        assert set(done.generator_lag_ms) == LAG_KEYS
        assert 0 <= done.generator_lag_ms["p99"] < 50
        assert 0 <= done.periodic_pct < 5
        series = done.timeseries
        assert len(series["lag_p99_ms"]) == len(series["rps"]) == len(series["lag_max_ms"]) >= 2
        for part in done.parts:
            assert set(part.lag_ms) == LAG_KEYS and part.periodic_pct >= 0
        assert len(done.parts) == (n if n > 1 else 0)


def _stall(run: LabRun, stop_s: float, every_s: float, until: threading.Event) -> None:
    """Stop the step's generator for `stop_s` every `every_s`, as a blocked loop would."""
    run.wait_measuring("gunicorn-asyncio", 0)
    gen = run.pid("loadgen")
    assert gen is not None
    while not until.is_set():
        try:
            os.kill(gen.pid, signal.SIGSTOP)
            time.sleep(stop_s)
            os.kill(gen.pid, signal.SIGCONT)
        except ProcessLookupError:
            return
        time.sleep(every_s - stop_s)


def test_a_stalled_generator_is_flagged_and_not_crowned_on_p99(tmp_path: Path) -> None:
    """The lab's own engine (oha has no probe of its own lateness)."""
    args = ("--models", "gunicorn-asyncio", "--levels", "10", "--duration", "4", "--engine", "lab")
    run = LabRun(tmp_path, *args, "--warmup", "0", "--delay-ms", "20")
    try:
        with striking(_stall, run, 0.1, 0.4, join_s=5):
            assert run.finish() == 0, run.output()
    finally:
        run.kill()
    (step,) = run.steps()
    assert step["generator_lag_ms"]["p99"] >= 50, step["generator_lag_ms"]
    assert "generator_lag" in step["flags"], step["flags"]
    assert max(step["timeseries"]["lag_max_ms"]) >= 80
    (ranking,) = judge(load(run.dir).points)
    assert ranking.best_p99 == ()
    assert "generator_lag on 1 step(s)" in run.output()
