"""A point's trials in one figure (the median, and the spread that flags it `unstable`) and the
compact per-second histograms the analysis reads percentiles from. Intervals and every comparison
of two points are the one test of difference's (`lab.verdict.difference`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from hdrh.histogram import HdrHistogram

from lab.record import hist
from lab.record.thresholds import T

UNSTABLE_SPREAD = T.trials_unstable_spread_share  # (max - min) / median of trials: `unstable`


@dataclass(frozen=True)
class Estimate:
    """A point estimate from repeated samples (the median: robust to one bad trial) and their
    relative spread; its interval is the one test of difference's (`lab.verdict.difference`)."""

    n: int
    median: float
    spread: float  # (max - min) / median; 0 for one sample

    @property
    def unstable(self) -> bool:
        return self.n >= 2 and self.spread >= UNSTABLE_SPREAD


def estimate(values: Sequence[float]) -> Estimate:
    xs = sorted(float(v) for v in values if not math.isnan(float(v)))
    if not xs:
        return Estimate(0, math.nan, math.nan)
    median = statistics.median(xs)
    return Estimate(len(xs), median, (xs[-1] - xs[0]) / median if median else 0.0)


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
