"""The one test of difference against a reference written here (plain arithmetic, Hypothesis):
symmetric whatever the floor and the metric, decisive where a hand-computed Welch is, centred on
the difference of means, and Holm's step-down as its definition reads. Beside
tests/test_claims_properties.py, whose invariants run the claims' consumers."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lab.verdict.difference import NO_FLOOR, Floor, Side, differ, floor, holm, t975, t_tail
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
@given(st.lists(st.one_of(st.floats(0.0, 1.0), st.just(math.nan)), max_size=12))
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
