"""The one test of difference against a reference written here (plain arithmetic, Hypothesis):
symmetric whatever the floor and the metric, decisive where a hand-computed Welch is, centred on
the difference of means, and Holm's step-down as its definition reads. Beside
tests/test_claims_properties.py, whose invariants run the claims' consumers."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lab.record.thresholds import T
from lab.verdict.difference import (
    FLAGGED,
    NO_FLOOR,
    Difference,
    Floor,
    Side,
    compare_points,
    differ,
    floor,
    holm,
    t975,
    t_tail,
)
from tests.test_claims_properties import SETTINGS


def sides(metric: str) -> st.SearchStrategy[Side]:
    """A side of any metric: 1-4 trials, a seconds' half-width or none."""
    trials = st.lists(st.floats(1.0, 1000.0), min_size=1, max_size=4)
    return st.builds(
        lambda xs, own: Side(metric, math.fsum(xs) / len(xs), tuple(xs), own),
        trials,
        st.sampled_from((0.0, 0.0, 5.0)),
    )


FLOORS = st.sampled_from(
    (NO_FLOOR, floor(), Floor(0.05, 0.2, 3, ("x", "y"), "test"), Floor(0.0, 0.1, 30, (), ""))
)


@SETTINGS
@given(
    st.sampled_from(("rps", "p99", "cpu_ms_per_req")).flatmap(
        lambda m: st.tuples(sides(m), sides(m))
    ),
    FLOORS,
)
def test_differ_is_symmetric(pair: tuple[Side, Side], noise: Floor) -> None:
    """b against a is a against b mirrored, whatever the floor (none: the rule without an
    interval, which once scaled by a's value only) and the metric."""
    a, b = pair
    ab, ba = differ(a, b, noise), differ(b, a, noise)
    assert (ab.word, ab.basis, ab.apart) == (ba.word, ba.basis, ba.apart)
    assert ab.lo == pytest.approx(-ba.hi) and ab.hi == pytest.approx(-ba.lo)
    assert ab.p == pytest.approx(ba.p, nan_ok=True)


@SETTINGS
@given(
    st.sampled_from(("rps", "p99")),
    st.lists(st.floats(1.0, 1000.0), min_size=2, max_size=5),
    st.lists(st.floats(1.0, 1000.0), min_size=2, max_size=5),
)
def test_differ_agrees_with_a_reference_welch_where_it_is_decisive(
    metric: str, xs: list[float], ys: list[float]
) -> None:
    """Several trials both sides: the reference computes the difference of means and Welch's
    standard error by hand. Beyond 12.71 standard errors (t's largest 97.5% quantile, one degree
    of freedom) and the instrument's budget it must be apart, the right way; within 1.96 (t's
    smallest) and within the budget, a tie. The interval is centred on the difference of means."""
    a, b = (
        Side(metric, math.fsum(xs) / len(xs), tuple(xs)),
        Side(metric, math.fsum(ys) / len(ys), tuple(ys)),
    )
    d = differ(a, b, NO_FLOOR)
    diff = b.value - a.value
    se = math.sqrt(ref_var(xs) / len(xs) + ref_var(ys) / len(ys))
    budget = max(3.0, 0.15 * max(a.value, b.value)) if metric == "p99" else 0.0
    assert (d.lo + d.hi) / 2 == pytest.approx(diff, abs=1e-6)
    if abs(diff) > 12.71 * se + budget + 1e-9:
        assert d.apart and (d.lo > 0) == (diff > 0)
        assert d.p < 0.05
    if (
        abs(diff) < 1.96 * se - 1e-9
        and abs(diff) < budget
        or abs(diff) < 1.96 * se - 1e-9
        and metric == "rps"
    ):
        assert not d.apart and d.p >= 0.05 - 1e-3


def ref_var(xs: list[float]) -> float:
    m = math.fsum(xs) / len(xs)
    return math.fsum((x - m) ** 2 for x in xs) / (len(xs) - 1)


@SETTINGS
@given(
    st.lists(st.one_of(st.floats(0.0, 0.06), st.floats(0.0, 1.0), st.just(math.nan)), max_size=12)
)
def test_holm_is_the_reference_step_down(ps: list[float]) -> None:
    """A p-value is a claim iff it and every smaller one pass its step (alpha / (m - k))."""
    tested = sorted(p for p in ps if not math.isnan(p))
    m = len(tested)
    passing = 0
    while passing < m and tested[passing] < 0.05 / (m - passing):
        passing += 1
    cut = tested[passing - 1] if passing else -1.0
    expected = [not math.isnan(p) and p <= cut for p in ps]
    assert holm(ps) == expected


@pytest.mark.parametrize("df", [1, 2, 3, 4, 7, 12, 21, 30], ids=lambda d: f"df{d}")
def test_t_tail_is_the_integral_of_the_density(df: int) -> None:
    """P(T > t) by the closed form against Simpson's rule over Student's density."""
    c = math.gamma((df + 1) / 2) / (math.sqrt(df * math.pi) * math.gamma(df / 2))

    def density(x: float) -> float:
        return c * (1 + x * x / df) ** (-(df + 1) / 2)

    for t in (0.5, 1.0, t975(df)):
        # substitute x = t / u, u in (0, 1]: the tail integral over a finite range
        n = 4000
        h = 1 / n
        total = 0.0
        for i in range(1, n + 1):
            u = i * h
            w = 4 if i % 2 else 2
            w = 1 if i == n else w
            total += w * density(t / u) * t / (u * u)
        tail = total * h / 3
        assert t_tail(t, df) == pytest.approx(tail, rel=2e-3, abs=1e-5)
    assert 2 * t_tail(t975(df), df) == pytest.approx(0.05, abs=2e-4)


@SETTINGS
@given(
    st.floats(0.0, 1000.0), st.floats(0.0, 1000.0), st.floats(-2000.0, 0.0), st.floats(0.0, 2000.0)
)
def test_a_relative_difference_is_the_reference_ratio(
    a: float, b: float, lo: float, hi: float
) -> None:
    """(b - a) / a with its interval over a, the low end never below -100%; nan where a is 0."""
    d = Difference("rps", a, b, min(lo, b - a), max(hi, b - a), "trials")
    rel, low, high = d.relative()
    if a == 0:
        assert math.isnan(rel) and d.percent() == "-"
        return
    assert rel == pytest.approx((b - a) / a)
    assert low == pytest.approx(max(d.lo, -a) / a) and low >= -1.0
    assert high == pytest.approx(d.hi / a)
    assert d.percent() == f"{rel:+.0%} [{low:+.0%}, {high:+.0%}]"
    flagged = Difference("rps", a, b, math.nan, math.nan, "flagged")
    assert flagged.percent() == f"{(b - a) / a:+.0%} [not compared]"


def test_a_sides_interval_is_its_trials_t_interval_never_below_zero() -> None:
    """Three trials 9, 10, 11: 10 +- 4.303 x 1 / sqrt(3) (Student's t at 2 degrees of freedom);
    a wide one stops at zero; one trial with no seconds and no floor has none."""
    lo, hi = Side("rps", 10.0, (9.0, 10.0, 11.0)).interval(NO_FLOOR)
    half = 4.303 / math.sqrt(3)
    assert (lo, hi) == (pytest.approx(10 - half), pytest.approx(10 + half))
    lo, hi = Side("rps", 2.0, (1.0, 2.0, 3.0)).interval(NO_FLOOR)
    assert lo == 0.0 and hi == pytest.approx(2 + 4.303 / math.sqrt(3))
    assert all(math.isnan(x) for x in Side("rps", 5.0, (5.0,)).interval(NO_FLOOR))


def test_welch_against_its_hand_computed_degrees_of_freedom() -> None:
    """1, 2, 3 against 2, 4, 6, 8: the half-width is t(df) x se with Welch-Satterthwaite's df
    worked out here; identical trials have no spread and fall to the no-interval rule."""
    xs, ys = [1.0, 2.0, 3.0], [2.0, 4.0, 6.0, 8.0]
    va, vb = ref_var(xs) / 3, ref_var(ys) / 4  # 1/3 and 20/12
    df = (va + vb) ** 2 / (va**2 / 2 + vb**2 / 3)
    d = differ(Side("rps", 2.0, tuple(xs)), Side("rps", 5.0, tuple(ys)), NO_FLOOR)
    assert d.df == pytest.approx(df)
    assert d.hi - d.diff == pytest.approx(t975(df) * math.sqrt(va + vb))
    same = differ(Side("rps", 100.0, (100.0, 100.0)), Side("rps", 100.0, (100.0, 100.0)))
    assert same.hi == pytest.approx(T.difference_without_interval_share * 100)


def test_holm_steps_down_at_each_rank() -> None:
    """0.01 < 0.05/3, 0.02 < 0.05/2, 0.04 < 0.05/1: all three; 0.03 at the second step fails."""
    assert holm([0.04, 0.01, 0.02]) == [True, True, True]
    assert holm([0.01, 0.03, 0.04]) == [True, False, False]
    assert holm([0.05 / 3, 0.001]) == [True, True]  # 0.0167 < 0.05 / 1 at the second step


def test_compare_points_passes_each_sides_flags_and_the_floor() -> None:
    from tests.test_judge import record

    a, b = [record("m", 100.0)], [record("m", 100.0)]
    left = compare_points(a, b, NO_FLOOR, (("lab_limited",), ()))
    right = compare_points(a, b, NO_FLOOR, ((), ("lab_limited",)))
    assert left["rps"].basis == right["rps"].basis == FLAGGED
    assert compare_points(a, b, NO_FLOOR)["rps"].basis != compare_points(a, b, floor())["rps"].basis


def test_a_sides_basis_is_what_its_interval_rests_on() -> None:
    """The label the summary prints: trials from two on; one trial's floor where the floor has
    this metric (two A/A points suffice); else its seconds; else none."""
    two = Floor(0.05, 0.1, 2, ("x", "y"), "test")
    assert Side("rps", 1.0, (1.0, 1.0)).basis(NO_FLOOR) == "trials"
    assert Side("rps", 1.0, (1.0,)).basis(two) == "seconds+floor"
    assert Side("rps", 1.0, (1.0,), 0.5).basis(NO_FLOOR) == "seconds"
    assert Side("rps", 1.0, (1.0,)).basis(NO_FLOOR) == "none"
    assert Side("cpu_ms_per_req", 1.0, (1.0,)).basis(two) == "none"  # no floor for it
    assert Side("p99", 1.0, (1.0,)).basis(Floor(0.05, 0.0, 30, (), "")) == "none"
    assert Side("rps", 1.0, (1.0,)).basis() == "seconds+floor"  # the committed floor
    assert NO_FLOOR.words().startswith("no run-to-run floor")
    assert two.words().startswith("intervals of one trial include a run-to-run floor of 5.0%")


def test_t_tail_is_symmetric_about_zero() -> None:
    for df in (1, 2, 5, 30, 500):
        assert t_tail(0.0, df) == pytest.approx(0.5)
        assert t_tail(-1.5, df) == pytest.approx(1 - t_tail(1.5, df))
