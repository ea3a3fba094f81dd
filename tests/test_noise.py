"""Claims that survive an A/A test (`lab.verdict.difference`): no p99 compared on fewer than ten
requests beyond it, nothing called changed between two runs of the same code or within the
calibrated noise, and a real difference beyond noise still called. Built records and run
directories: the thing under test is pure analysis."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from analysis.compare import compare
from analysis.judge import judge, sentence
from analysis.loading import load
from analysis.points import build
from lab.verdict.difference import MIN_BEYOND, TOO_FEW, beyond, calibrate, floor
from tests.fixture_run import FixtureStep, build_run
from tests.helpers import record

BASE_MS = tuple(100.0 + i % 40 for i in range(400))  # 400 requests a second, p99 139 ms


def steps(rps: float = 400.0, scale: float = 1.0, users: int = 100) -> list[FixtureStep]:
    """Two models, one trial each, 3 s of `rps` (+-5% a second) and latencies BASE_MS x scale:
    1,200 requests a point, 12 beyond p99."""
    per_second = (rps * 0.95, rps, rps * 1.05)
    latencies = tuple(ms * scale for ms in BASE_MS)
    return [FixtureStep(m, users, 1, per_second, latencies) for m in ("a", "b")]


def test_the_committed_floor_names_its_a_a_runs() -> None:
    noise = floor()
    assert noise.points >= 2 and len(noise.runs) == 2 and noise.machine
    assert 0 < noise.rps_sd < 1 and 0 < noise.p99_sd < 1
    assert " and ".join(noise.runs) in noise.words()


def test_the_judge_names_no_best_p99_on_too_few_requests_beyond_it() -> None:
    thin = judge(build([record("a", 9.6, users=1, p99=110), record("b", 9.5, users=1, p99=150)]))
    (v,) = thin
    assert v.best_p99 == () and v.best_rps  # 96 requests: 0.96 beyond p99
    assert "best p99 none (at most 1.0 requests beyond p99: 10 needed)" in sentence(v)
    (v,) = judge(build([record("a", 200, p99=110), record("b", 200, p99=300)]))
    assert v.best_p99 == ("a",)  # 2,000 requests each: 20 beyond p99


def test_a_p99_within_the_instruments_error_is_a_tie() -> None:
    (v,) = judge(build([record("a", 200, p99=100), record("b", 200, p99=112)]))
    assert set(v.best_p99) == {"a", "b"}  # 12% apart: within the instrument's 15%


@pytest.mark.parametrize(
    ("b_rps", "b_scale"),
    [(400.0, 1.0), (404.0, 1.1)],
    ids=["identical", "within-noise"],
)
def test_a_a_runs_call_nothing_changed(tmp_path: Path, b_rps: float, b_scale: float) -> None:
    a = build_run(tmp_path / "a", steps())
    b = build_run(tmp_path / "b", steps(b_rps, b_scale))
    frame = compare(load(a), load(b))
    assert len(frame) == 2 and set(frame["p99_basis"]) != {TOO_FEW}
    assert not frame["rps_significant"].any() and not frame["p99_significant"].any()


def test_a_real_difference_beyond_noise_is_called(tmp_path: Path) -> None:
    a = build_run(tmp_path / "a", steps())
    b = build_run(tmp_path / "b", steps(800.0, 2.0))  # twice the throughput, twice the p99
    frame = compare(load(a), load(b))
    assert frame["rps_significant"].all() and frame["p99_significant"].all()
    assert set(frame["rps_basis"]) == {"seconds+floor"}


def test_a_thin_p99_is_not_compared(tmp_path: Path) -> None:
    thin = [FixtureStep("a", 1, 1, (10.0,) * 3, (100.0,) * 10)]  # 30 requests
    slow = [FixtureStep("a", 1, 1, (10.0,) * 3, (300.0,) * 10)]
    row = compare(load(build_run(tmp_path / "a", thin)), load(build_run(tmp_path / "b", slow)))
    assert row.iloc[0]["p99_basis"] == TOO_FEW and not row.iloc[0]["p99_significant"]
    assert beyond(999) < MIN_BEYOND <= beyond(1000)


def test_calibrate_is_the_root_mean_square_of_a_change_over_root_two() -> None:
    assert calibrate([0.1, -0.1, math.nan]) == pytest.approx(0.1 / math.sqrt(2))
    assert calibrate([]) == 0.0
