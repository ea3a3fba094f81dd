"""The judge on hand-built records: best, ties, exclusions, single trials. No I/O."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from analysis.judge import judge, sentence
from lab.record.step import StepRecord
from tests.helpers import record

ROOT = Path(__file__).resolve().parent.parent


def only(records: list[StepRecord]):
    (verdict,) = judge(records)
    return verdict


def test_best_is_the_highest_throughput_and_lowest_p99() -> None:
    v = only([record("a", 200, p99=150), record("b", 150, p99=110)])  # 15+ requests beyond p99
    assert v.best_rps == ("a",) and v.best_p99 == ("b",)


@pytest.mark.parametrize(
    "flag",
    ["serialized", "server_died", "server_hung", "upstream_down", "start_failed", "interrupted"],
    ids=lambda f: f,
)
def test_a_faulted_step_is_never_best(flag: str) -> None:
    v = only([record("fast", 500, p99=50, flags=(flag,)), record("slow", 100, p99=200)])
    assert v.best_rps == ("slow",) and v.best_p99 == ("slow",)
    assert v.excluded == {"fast": (flag,)}
    assert f"excluded: fast ({flag})" in sentence(v)


def test_when_every_model_is_excluded_there_is_no_best() -> None:
    v = only([record("a", 100, flags=("start_failed",))])
    assert v.best_rps == () and "no fair result" in sentence(v)


def test_overlapping_trial_intervals_are_a_tie() -> None:
    recs = [record("a", r, trial=t) for t, r in enumerate((100, 104, 96), 1)]
    recs += [record("b", r, trial=t) for t, r in enumerate((101, 99, 103), 1)]
    v = only(recs)
    assert set(v.best_rps) == {"a", "b"} and v.trials == 3
    assert "tied" in sentence(v) and "single trial" not in sentence(v)


def test_apart_intervals_are_no_tie() -> None:
    recs = [record("a", r, trial=t) for t, r in enumerate((200, 201, 199), 1)]
    recs += [record("b", r, trial=t) for t, r in enumerate((100, 101, 99), 1)]
    assert only(recs).best_rps == ("a",)


def test_single_trial_uses_its_seconds_and_says_so() -> None:
    noisy = (60, 140) * 5  # mean 100, wide per-second spread
    v = only([record("a", 100, seconds=noisy), record("b", 95, seconds=noisy)])
    assert set(v.best_rps) == {"a", "b"} and v.trials == 1
    assert "single trial" in sentence(v)
    # Flat seconds: only the committed run-to-run floor separates them. Its half-width of a
    # difference lies between 1.96 and 2.1 (t at 20+ degrees of freedom) x sd x |a, b|, read
    # here from noise.toml itself, not through the code under test.
    calibration = tomllib.loads((ROOT / "lab/verdict/noise.toml").read_text())
    assert calibration["points"] >= 20
    sd = calibration["rps_sd"]
    apart = 100 * (1 - 4 * sd)  # 400 sd against at most 2.1 * 139 sd: apart
    assert only([record("a", 100), record("b", apart)]).best_rps == ("a",)
    within = 100 * (1 - sd)  # 100 sd against at least 1.96 * 141 sd: a tie
    assert set(only([record("a", 100), record("b", within)]).best_rps) == {"a", "b"}


def test_a_qualifying_flag_is_a_note_not_an_exclusion() -> None:
    v = only([record("a", 100, flags=("client_saturated",)), record("b", 50)])
    assert v.best_rps == ("a",) and not v.excluded
    assert any("load generator" in note for note in v.notes)


def test_levels_and_modes_are_judged_apart() -> None:
    verdicts = judge(
        [record("a", 10, users=1), record("b", 90, users=10), record("a", 80, users=10)]
    )
    assert [(v.level, v.best_rps[0]) for v in verdicts] == [(1.0, "a"), (10.0, "b")]
