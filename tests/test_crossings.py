"""A crossover, piece by piece (`analysis.metrics`): where the sign of a pair's difference flips
and who overtakes whom, the p-value of the flip only in the flip's own direction, the words that
count what was tested, and the point table's figures the flips are read from. Each expectation
is worked out here by hand from the numbers given, not by the functions under test (a mutation
run found these parts untested: docs/tests-that-cannot-fail.md)."""

from __future__ import annotations

import math
import statistics
from pathlib import Path

import pandas as pd
import pytest

from analysis.differences import _flips, _p_toward, crossing_words
from analysis.points import point
from tests.helpers import record


def test_a_flip_is_where_the_sign_changes_and_names_the_overtaker() -> None:
    """a - b by level: +0.5, -0.5 (b overtakes a at 10), 0 (no order: skipped), +2 (a overtakes
    b back at 50, against the level before that had an order: 10)."""
    diff = pd.Series([0.5, -0.5, 0.0, 2.0], index=[1, 10, 20, 50])
    assert _flips(diff, "a", "b") == [(10, 1, "b", "a"), (50, 10, "a", "b")]
    assert _flips(pd.Series([3.0, 1.0, 0.0, 2.0], index=[1, 10, 20, 50]), "a", "b") == []


def test_a_flip_s_p_value_counts_only_in_its_own_direction() -> None:
    """One trial each at 10,000 answers: 2,000 against 1,000 req/s is far beyond the floor; the
    same pair read the other way round points against the flip (p = 1, never clear); a change
    of half a request or half a millisecond is within noise but still the flip's way (p < 1)."""
    slow, fast = point([record("a", 1000.0)]), point([record("b", 2000.0)])
    assert _p_toward("rps", slow, fast) < 0.001  # the overtaker higher: toward
    assert _p_toward("rps", fast, slow) == 1.0  # the "overtaker" lower: against
    assert 0.5 < _p_toward("rps", slow, point([record("b", 1000.5)])) < 1.0
    high = point([record("a", 1000.0, p99=400.0)])
    low = point([record("b", 1000.0, p99=100.0)])
    assert _p_toward("p99_ms", high, low) < 0.001  # the overtaker's p99 lower: toward
    assert _p_toward("p99_ms", low, high) == 1.0
    assert _p_toward("p99_ms", low, point([record("b", 1000.0, p99=100.5)])) == 1.0
    thin = point([record("c", 10.0, p99=400.0)])  # 100 answers: 1 beyond p99, not compared
    assert math.isnan(_p_toward("p99_ms", thin, low))


def test_the_crossing_words_count_what_was_tested_and_what_could_not_be() -> None:
    cross = pd.DataFrame({"p": [0.001, 0.2, math.nan], "clear": [True, False, False]})
    held = "flip(s) tested beyond noise, Benjamini-Hochberg-corrected for their number"
    assert crossing_words(cross) == f"1 of 2 {held} (1 could not be tested)"
    assert crossing_words(cross.iloc[:2]) == f"1 of 2 {held}"
    assert crossing_words(cross.iloc[:0]) == f"0 of 0 {held}"


def test_the_point_table_prints_the_trials_mean_the_test_compares(tmp_path: Path) -> None:
    """Three trials of 100, 100 and 130 req/s: the median is 100, the mean 110; the table's rps
    is the mean (the figure the one test of difference compares), its p99 the trials' mean."""
    from analysis.loading import load
    from analysis.metrics import point_table
    from tests.fixture_run import FixtureStep, build_run

    trials = ((100.0, 50.0), (100.0, 50.0), (130.0, 80.0))
    steps = [
        FixtureStep("m", 10, trial=t, rps_per_second=(rps,) * 3, latencies_ms=(p99,))
        for t, (rps, p99) in enumerate(trials, 1)
    ]
    (row,) = point_table(load(build_run(tmp_path / "run", steps))).to_dict("records")
    assert row["rps"] == pytest.approx(statistics.fmean(r for r, _ in trials), rel=1e-3)
    assert row["p99_ms"] == pytest.approx(statistics.fmean(p for _, p in trials), rel=1e-2)


def test_no_points_no_crossovers_in_the_same_columns() -> None:
    from analysis.differences import crossovers

    cols = ["metric", "mode", "concurrency", "from_concurrency", "overtaker", "overtaken", "p"]
    assert list(crossovers(pd.DataFrame(), {})) == [*cols, "clear"]
