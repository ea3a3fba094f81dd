"""A crossover, piece by piece (`analysis.metrics`): where the sign of a pair's difference flips
and who overtakes whom, the p-value of the flip only in the flip's own direction, and the words
that count what was tested. Each expectation is worked out here by hand from the numbers given,
not by the functions under test (a mutation run found these parts untested: docs/trust.md)."""

from __future__ import annotations

import math

import pandas as pd

from analysis.metrics import _flips, _p_toward, crossing_words
from tests.test_judge import record


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
    slow, fast = [record("a", 1000.0)], [record("b", 2000.0)]
    assert _p_toward("rps", slow, fast) < 0.001  # the overtaker higher: toward
    assert _p_toward("rps", fast, slow) == 1.0  # the "overtaker" lower: against
    assert 0.5 < _p_toward("rps", slow, [record("b", 1000.5)]) < 1.0
    high, low = [record("a", 1000.0, p99=400.0)], [record("b", 1000.0, p99=100.0)]
    assert _p_toward("p99_ms", high, low) < 0.001  # the overtaker's p99 lower: toward
    assert _p_toward("p99_ms", low, high) == 1.0
    assert _p_toward("p99_ms", low, [record("b", 1000.0, p99=100.5)]) == 1.0
    thin = [record("c", 10.0, p99=400.0)]  # 100 answers: 1 beyond p99, not compared
    assert math.isnan(_p_toward("p99_ms", thin, low))


def test_the_crossing_words_count_what_was_tested_and_what_could_not_be() -> None:
    cross = pd.DataFrame({"p": [0.001, 0.2, math.nan], "clear": [True, False, False]})
    held = "flip(s) tested beyond noise, Holm-corrected for their number"
    assert crossing_words(cross) == f"1 of 2 {held} (1 could not be tested)"
    assert crossing_words(cross.iloc[:2]) == f"1 of 2 {held}"
    assert crossing_words(cross.iloc[:0]) == f"0 of 0 {held}"
