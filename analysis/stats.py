"""Small-sample statistics for repeated trials: a 95% interval, a spread flag, a two-sample test.

A sweep point has few trials (the `standard` scenario: 3). A bootstrap of three values can only
return those three values, so it claims far more certainty than it has; Student's t with n-1
degrees of freedom is the honest interval for so few samples (t = 4.30 for n = 3). The point
estimate reported is the median (robust to one bad trial); the interval is t around the mean.
No scipy: the two-sided 97.5% t quantiles are tabulated below.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from hdrh.histogram import HdrHistogram

from lab.record import hist
from lab.record.thresholds import T

BOOTSTRAP_ROUNDS = 400  # redraws of the seconds when comparing percentiles of single trials
UNSTABLE_SPREAD = T.trials_unstable_spread_share  # (max - min) / median of trials: `unstable`
# two-sided 95% Student t critical values, index = degrees of freedom (1..30)
_T975 = (
    float("nan"),
    12.706,
    4.303,
    3.182,
    2.776,
    2.571,
    2.447,
    2.365,
    2.306,
    2.262,
    2.228,
    2.201,
    2.179,
    2.160,
    2.145,
    2.131,
    2.120,
    2.110,
    2.101,
    2.093,
    2.086,
    2.080,
    2.074,
    2.069,
    2.064,
    2.060,
    2.056,
    2.052,
    2.048,
    2.045,
    2.042,
)


def t975(df: float) -> float:
    """The 97.5% t quantile; fractional df (Welch) rounds down, which widens the interval."""
    if df < 1 or math.isnan(df):
        return float("nan")
    d = int(math.floor(df))
    if d < len(_T975):
        return _T975[d]
    return 1.96 + 2.4 / d  # within 0.002 of the exact quantile for df > 30


@dataclass(frozen=True)
class Estimate:
    """A point estimate from repeated samples with its 95% interval and relative spread."""

    n: int
    median: float
    mean: float
    lo: float  # 95% CI of the mean (nan when n < 2)
    hi: float
    spread: float  # (max - min) / median; 0 for one sample

    @property
    def unstable(self) -> bool:
        return self.n >= 2 and self.spread >= UNSTABLE_SPREAD


def estimate(values: Sequence[float]) -> Estimate:
    xs = sorted(float(v) for v in values if not math.isnan(float(v)))
    n = len(xs)
    if n == 0:
        nan = float("nan")
        return Estimate(0, nan, nan, nan, nan, nan)
    mid = n // 2
    median = xs[mid] if n % 2 else (xs[mid - 1] + xs[mid]) / 2
    mean = sum(xs) / n
    spread = (xs[-1] - xs[0]) / median if median else 0.0
    if n < 2:
        return Estimate(n, median, mean, float("nan"), float("nan"), spread)
    half = t975(n - 1) * math.sqrt(_var(xs, mean) / n)
    return Estimate(n, median, mean, mean - half, mean + half, spread)


def _var(xs: Sequence[float], mean: float) -> float:
    return sum((x - mean) ** 2 for x in xs) / (len(xs) - 1)


@dataclass(frozen=True)
class Change:
    """B relative to A: the difference of means with its Welch 95% interval."""

    mean_a: float
    mean_b: float
    diff: float
    lo: float
    hi: float

    @property
    def relative(self) -> float:
        return self.diff / self.mean_a if self.mean_a else float("nan")

    @property
    def significant(self) -> bool:
        """The 95% interval of the difference excludes zero."""
        return not math.isnan(self.lo) and (self.lo > 0 or self.hi < 0)


def welch(a: Sequence[float], b: Sequence[float]) -> Change:
    """Welch's unequal-variance interval for mean(b) - mean(a); nan bounds if either n < 2."""
    a = [float(x) for x in a if not math.isnan(float(x))]
    b = [float(x) for x in b if not math.isnan(float(x))]
    nan = float("nan")
    if not a or not b:
        return Change(nan, nan, nan, nan, nan)
    ma, mb = sum(a) / len(a), sum(b) / len(b)
    diff = mb - ma
    if len(a) < 2 or len(b) < 2:
        return Change(ma, mb, diff, nan, nan)
    va, vb = _var(a, ma) / len(a), _var(b, mb) / len(b)
    se2 = va + vb
    if se2 == 0:
        return Change(ma, mb, diff, diff, diff)
    df = se2**2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    half = t975(df) * math.sqrt(se2)
    return Change(ma, mb, diff, diff - half, diff + half)


Second = tuple[np.ndarray, np.ndarray]  # one second of a step: bin values (ms), their counts


def seconds_of(h: HdrHistogram) -> Second:
    """A per-second histogram as compact arrays (a full HdrHistogram holds ~200 KB of counts)."""
    values, counts = hist.bins(h)
    return values / 1000, counts


def percentiles_of(second: Second, percentiles: Sequence[float]) -> list[float]:
    """Percentiles (ms) of compact counts, computed as HdrHistogram does; nan when empty."""
    values, counts = second
    if counts.sum() == 0:
        return [float("nan")] * len(percentiles)
    cumulative = counts.cumsum()
    targets = hist.rank(np.asarray(percentiles, dtype=float), cumulative[-1])
    return [float(v) for v in values[np.searchsorted(cumulative, targets)]]


def bootstrap_percentile(a: list[Second], b: list[Second], percentile: float) -> Change:
    """Interval of percentile(b) - percentile(a) by resampling whole seconds of each step.

    Slow requests come in bursts (a GC pause, a scheduler hiccup, a stalled upstream), so
    requests are not independent; resampling seconds (a block bootstrap) keeps each burst
    together and gives an honest interval where resampling requests would claim too much.
    Each round draws as many seconds as were recorded, with replacement, from each run.
    """
    a = [s for s in a if s[1].sum() > 0]
    b = [s for s in b if s[1].sum() > 0]
    if not a or not b:
        nan = float("nan")
        return Change(nan, nan, nan, nan, nan)
    grid = np.unique(np.concatenate([v for v, _ in a + b]))
    pa = float(_percentile(grid, _counts(grid, a), percentile))
    pb = float(_percentile(grid, _counts(grid, b), percentile))
    if len(a) < 2 or len(b) < 2:
        return Change(pa, pb, pb - pa, float("nan"), float("nan"))
    rng = np.random.default_rng(0)  # fixed seed: the same two runs always give the same verdict
    diffs = np.sort(_redraw(grid, b, percentile, rng) - _redraw(grid, a, percentile, rng))
    lo, hi = diffs[int(0.025 * len(diffs))], diffs[int(0.975 * len(diffs)) - 1]
    return Change(pa, pb, pb - pa, float(lo), float(hi))


def _counts(grid: np.ndarray, seconds: list[Second]) -> np.ndarray:
    """Seconds x grid matrix of counts."""
    out = np.zeros((len(seconds), len(grid)))
    for row, (values, counts) in enumerate(seconds):
        out[row, np.searchsorted(grid, values)] = counts
    return out


def _percentile(grid: np.ndarray, counts: np.ndarray, percentile: float) -> np.ndarray:
    """Percentile of the counts summed over seconds (axis -2), as HdrHistogram computes it."""
    cumulative = counts.sum(axis=-2).cumsum(axis=-1)
    target = hist.rank(percentile, cumulative[..., -1:])
    picked: np.ndarray = grid[(cumulative < target).sum(axis=-1)]
    return picked


def _redraw(
    grid: np.ndarray, seconds: list[Second], percentile: float, rng: np.random.Generator
) -> np.ndarray:
    matrix = _counts(grid, seconds)
    picks = rng.integers(0, len(seconds), size=(BOOTSTRAP_ROUNDS, len(seconds)))
    return _percentile(grid, matrix[picks], percentile)
