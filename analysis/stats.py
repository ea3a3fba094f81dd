"""Small-sample statistics for repeated trials (a 95% interval, a spread flag) and the compact
per-second histograms the analysis reads percentiles from.

A sweep point has few trials (the `standard` scenario: 3). A bootstrap of three values can only
return those three values, so it claims far more certainty than it has; Student's t with n-1
degrees of freedom is the honest interval for so few samples (t = 4.30 for n = 3). The point
estimate reported is the median (robust to one bad trial); the interval is t around the mean.
The t quantiles and every comparison of two points are the one test of difference's
(`lab.verdict.difference`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from hdrh.histogram import HdrHistogram

from lab.record import hist
from lab.record.thresholds import T
from lab.verdict.difference import t975

UNSTABLE_SPREAD = T.trials_unstable_spread_share  # (max - min) / median of trials: `unstable`


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
