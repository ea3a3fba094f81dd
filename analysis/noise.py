"""When two measured points differ beyond noise: the one rule behind every "changed", "apart" and
crossover the lab prints.

Three parts, each from something measured:

1. **Enough requests beyond the percentile.** A p99 is read only where `MIN_BEYOND` (10) or more
   answered requests lie beyond it (docs/trust.md: p99 from 1,000 requests). Below that the p99 is
   nearly one request's luck, and the point's p99 is compared with nothing ("too few").
2. **Never finer than the instrument.** The lab's p99 agrees with wrk's and oha's within 15% or
   3 ms, whichever is larger (benchmarks/latency_fidelity.py; the same budget flags
   `generator_lag`), so a p99 interval is never narrower than that on either side.
3. **Run-to-run variance.** A step's own seconds cannot see what differs from one run to the next
   (process placement, CPU frequency, caches, other tenants), so an interval from them alone calls
   differences between two runs of the same code. With two or more trials per point the trials
   carry that variance (they are separate steps, interleaved). With one trial the interval from
   the seconds is widened by a run-to-run floor: the relative spread of single-trial points
   between two runs of the same code (an A/A test, `benchmarks/aa_check.py --calibrate`), kept in
   analysis/noise.toml with those runs' ids and machine, and stated where it is used.
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from analysis.stats import Change, Second, bootstrap_percentile, t975, welch
from lab.record.thresholds import T

MIN_BEYOND = T.requests_beyond_percentile  # requests beyond a percentile before it is compared
BUDGET_SHARE = T.generator_lag_p99_share  # the instrument's p99 error budget: 15% of the p99 ...
BUDGET_MS = T.generator_lag_ms  # ... or 3 ms, whichever is larger (the same as generator_lag's)
CALIBRATION = Path(__file__).with_name("noise.toml")
TOO_FEW = "too few"  # the basis of a p99 comparison refused for too few requests beyond it


@dataclass(frozen=True)
class Floor:
    """Run-to-run relative standard deviation of one single-trial point, from an A/A pair."""

    rps_sd: float
    p99_sd: float
    points: int  # the points of the A/A pair the figures rest on
    runs: tuple[str, ...]  # the A/A runs' ids
    machine: str

    def point(self, metric: str, value: float, trials: int = 1) -> float:
        """The run-to-run half-width (95%) of one point's `metric`, a mean of `trials` trials."""
        sd = self.rps_sd if metric == "rps" else self.p99_sd
        if self.points < 2 or sd == 0 or math.isnan(value):
            return 0.0
        return t975(self.points) * sd * abs(value) / math.sqrt(max(trials, 1))

    def half(self, metric: str, a: float, b: float, trials: int = 1) -> float:
        """The run-to-run half-width (95%) of b - a, each a mean of `trials` trials."""
        return math.hypot(self.point(metric, a, trials), self.point(metric, b, trials))

    def words(self) -> str:
        """The floor as the summary and `lab compare` state it."""
        if self.points < 2:
            return "no run-to-run floor (intervals from each step's own seconds only)"
        return (
            f"intervals of one trial include a run-to-run floor of {self.rps_sd:.1%} "
            f"(throughput) and {self.p99_sd:.1%} (p99) per point, measured by A/A runs "
            f"{' and '.join(self.runs)} on {self.machine}"
        )


NO_FLOOR = Floor(0.0, 0.0, 0, (), "")


@cache
def floor() -> Floor:
    """The committed calibration (analysis/noise.toml)."""
    with open(CALIBRATION, "rb") as f:
        data = tomllib.load(f)
    return Floor(
        rps_sd=float(data["rps_sd"]),
        p99_sd=float(data["p99_sd"]),
        points=int(data["points"]),
        runs=tuple(str(r) for r in data["runs"]),
        machine=str(data["machine"]),
    )


def beyond(answered: float, percentile: float = 99.0) -> float:
    """Requests that lie beyond `percentile` among `answered`."""
    return answered * (1 - percentile / 100)


def readable(answered: float, percentile: float = 99.0) -> bool:
    """Enough requests lie beyond the percentile to compare it (rule 1)."""
    return beyond(answered, percentile) >= MIN_BEYOND


def budget_ms(a: float, b: float) -> float:
    """The instrument's error on a p99 difference: 15% of the larger p99, at least 3 ms."""
    return max(BUDGET_MS, BUDGET_SHARE * max(a, b))


def rps_change(
    trials: tuple[Sequence[float], Sequence[float]],
    seconds: tuple[Sequence[float], Sequence[float]],
    noise: Floor,
) -> tuple[Change, str]:
    """Throughput B - A: Welch over the trials where both have two or more, else Welch over the
    per-second throughput widened by the run-to-run floor."""
    if min(len(trials[0]), len(trials[1])) >= 2:
        return welch(*trials), "trials"
    change = welch(*seconds)
    extra = noise.half("rps", change.mean_a, change.mean_b)
    return widen(change, extra, 0.0), "seconds+floor" if extra else "seconds"


def p99_change(
    seconds: tuple[list[Second], list[Second]],
    trials: tuple[Sequence[float], Sequence[float]],
    noise: Floor,
) -> tuple[Change, str]:
    """p99 B - A with its interval (rules 1-3); the basis says what the interval rests on. The
    seconds are all of a point's (every trial's), so they also count its answered requests."""
    answered = [sum(float(c.sum()) for _, c in side) for side in seconds]
    change = bootstrap_percentile(seconds[0], seconds[1], 99.0)
    if not all(readable(n) for n in answered):
        nan = float("nan")
        return Change(change.mean_a, change.mean_b, change.diff, nan, nan), TOO_FEW
    budget = budget_ms(change.mean_a, change.mean_b)
    if min(len(trials[0]), len(trials[1])) >= 2:
        by_trials = welch(*trials)
        return widen(by_trials, 0.0, budget_ms(by_trials.mean_a, by_trials.mean_b)), "trials"
    n = max(1, min(len(trials[0]), len(trials[1])))
    extra = noise.half("p99", change.mean_a, change.mean_b, n)
    return widen(change, extra, budget), "seconds+floor" if extra else "seconds"


def widen(change: Change, extra: float, least: float) -> Change:
    """Add `extra` (an independent half-width) to each side of the interval in quadrature, then
    make each side at least `least`; an interval that is unknown (nan) stays unknown."""
    lo = change.diff - max(math.hypot(change.diff - change.lo, extra), least)
    hi = change.diff + max(math.hypot(change.hi - change.diff, extra), least)
    return Change(change.mean_a, change.mean_b, change.diff, lo, hi)


def calibrate(changes: Sequence[float]) -> float:
    """A run-to-run relative SD per point from an A/A pair's relative changes (B - A) / A: the
    root mean square over sqrt(2), since each change holds two points' noise. The whole change
    is counted as run-to-run, so the within-step part is counted twice (on the safe side)."""
    xs = [x for x in changes if not math.isnan(x)]
    if not xs:
        return 0.0
    return math.sqrt(sum(x * x for x in xs) / len(xs) / 2)
