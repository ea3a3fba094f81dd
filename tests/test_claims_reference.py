"""The one test of difference against references: written here where the test must stay apart
from the implementation, which now rests on scipy and statsmodels (plain arithmetic, Hypothesis:
symmetric whatever the floor and the metric, decisive where a hand-computed Welch is, centred on
the difference of means, a p-value that is the t tail integrated by Simpson's rule, and
Benjamini-Hochberg as its definition reads), and scipy's own Welch test where an independent
library is the better witness (the degrees of freedom and the p-value). Beside
tests/test_claims_properties.py, whose invariants run the claims' consumers."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy import stats

from lab.record.thresholds import T
from lab.verdict.difference import (
    NO_FLOOR,
    Difference,
    Floor,
    Side,
    corrected,
    differ,
    floor,
    t975,
)
from tests.helpers import SETTINGS


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
def test_the_correction_is_the_reference_benjamini_hochberg(ps: list[float]) -> None:
    """A p-value is a claim iff it is no larger than the largest k-th smallest that passes its
    step (k x alpha / m); nan is never a claim and never counted in m."""
    tested = sorted(p for p in ps if not math.isnan(p))
    m = len(tested)
    passing = [k for k in range(1, m + 1) if tested[k - 1] <= k * 0.05 / m]
    cut = tested[max(passing) - 1] if passing else -1.0
    expected = [not math.isnan(p) and p <= cut for p in ps]
    assert corrected(ps) == expected


def simpson_tail(t: float, df: int) -> float:
    """P(T > t), t >= 0, for Student's t: its density integrated by Simpson's rule (x = t / u,
    u in (0, 1]: the tail over a finite range), written apart from scipy."""
    c = math.gamma((df + 1) / 2) / (math.sqrt(df * math.pi) * math.gamma(df / 2))

    def density(x: float) -> float:
        return c * (1 + x * x / df) ** (-(df + 1) / 2)

    n = 4000
    h = 1 / n
    total = 0.0
    for i in range(1, n + 1):
        u = i * h
        w = 4 if i % 2 else 2
        w = 1 if i == n else w
        total += w * density(t / u) * t / (u * u)
    return total * h / 3


@pytest.mark.parametrize("df", [1, 2, 3, 4, 7, 12, 21, 30, 45], ids=lambda d: f"df{d}")
def test_a_differences_p_is_the_integral_of_the_t_density(df: int) -> None:
    """A difference of t standard errors with a 95% interval at `df` degrees of freedom: its
    p-value is twice the tail beyond t, and exactly 0.05 where the interval touches zero."""
    for t in (0.5, 1.0, 2.5, t975(df)):
        half = t975(df) * 1.0  # one standard error of 1
        d = Difference("rps", 100.0, 100.0 + t, t - half, t + half, "trials", float(df))
        assert d.p == pytest.approx(2 * simpson_tail(t, df), rel=2e-3, abs=1e-5)
        mirrored = Difference("rps", 100.0 + t, 100.0, -t - half, -t + half, "trials", float(df))
        assert mirrored.p == pytest.approx(d.p)
    touching = Difference("rps", 0.0, t975(df), 0.0, 2 * t975(df), "trials", float(df))
    assert touching.p == pytest.approx(0.05)


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
    """Three trials 9, 10, 11: 10 +- 4.302653 x 1 / sqrt(3) (Student's t at 2 degrees of
    freedom, to six decimals); a wide one stops at zero; one trial with no seconds and no floor
    has none."""
    lo, hi = Side("rps", 10.0, (9.0, 10.0, 11.0)).interval(NO_FLOOR)
    half = 4.302653 / math.sqrt(3)
    assert (lo, hi) == (pytest.approx(10 - half), pytest.approx(10 + half))
    lo, hi = Side("rps", 2.0, (1.0, 2.0, 3.0)).interval(NO_FLOOR)
    assert lo == 0.0 and hi == pytest.approx(2 + half)
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
    welch = stats.ttest_ind(ys, xs, equal_var=False)  # scipy's Welch, a library apart
    assert (d.df, d.p) == (pytest.approx(welch.df), pytest.approx(welch.pvalue))
    same = differ(Side("rps", 100.0, (100.0, 100.0)), Side("rps", 100.0, (100.0, 100.0)))
    assert same.hi == pytest.approx(T.difference_without_interval_share * 100)


def test_benjamini_hochberg_steps_up_from_the_largest() -> None:
    """Three p-values, steps 0.0167, 0.0333 and 0.05: the largest k whose k-th passes carries
    every smaller one, where Holm (0.05/3, 0.05/2, 0.05) stopped at the first failure."""
    assert corrected([0.04, 0.01, 0.02]) == [True, True, True]
    assert corrected([0.01, 0.03, 0.04]) == [True, True, True]  # Holm: the first only
    assert corrected([0.02, 0.03, 0.06]) == [True, True, False]  # Holm: none
    assert corrected([0.02, 0.04, 0.06]) == [False, False, False]
    assert corrected([0.5, math.nan, 0.02]) == [False, False, True]  # nan: not counted (m = 2)


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
