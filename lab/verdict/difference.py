"""One test of difference: every claim that two measured figures differ goes through here.

Best and ties, crossovers, the answer (as it is, bridged, ported), `lab compare` and the summary's
lead all ask the same question of two points (one model at one level, its trials combined): is the
difference of their throughput, or of their p99, beyond noise? Each used to answer it with its own
arithmetic (interval overlap in one place, the interval of the difference in another, none in a
third), so the same two points could be "tied" in the verdict and "changed" in a comparison. The
one answer, from the step records alone:

1. **What is compared.** A point's value is the mean of its trials (throughput, and the p99 of
   its answered requests): the statistic whose spread the interval measures (Welch's and Student's
   t are intervals of means; a median of two to five trials has no interval worth the name, so
   an interval of means centred on a difference of medians, as before, tested one figure and
   printed another). A point carrying a flag that excludes it, or (for p99) one that keeps
   its tail out, is compared with nothing; so is a p99 with fewer than `MIN_BEYOND` answered
   requests beyond it in its thinnest trial (one count per point: nearly one request's luck).
   Flags are read through the registry (`lab.record.flags`), so a flag added later works here.
2. **The interval of the difference** b - a, at 95%, around the difference of the two values:
   with two or more trials on both sides, Welch's over the trials (they carry run-to-run
   variance: separate, interleaved steps); otherwise each point's own half-width in quadrature:
   its trials' t interval, or for one trial the run-to-run floor the lab measured by A/A runs
   (`noise.toml`, written by `benchmarks/aa_check.py --calibrate`), with a throughput's own
   per-second interval beside it. The floor was calibrated on whole single-trial changes, so it
   already holds a step's own noise. A p99 interval is never narrower than the instrument's
   error (15% or 3 ms: benchmarks/latency_fidelity.py). With no interval at all (one trial, no
   floor, no seconds), a difference within `T.difference_without_interval_share` of the larger
   value is no difference. Every rule is symmetric: `differ(b, a)` is `differ(a, b)` mirrored.
   The floor holds a run-to-run figure for throughput and p99 only; any other metric compared
   (CPU per request, memory per connection) has no floor, so one trial of it rests on the
   no-interval rule.
3. **The words**: `APART` when the interval excludes zero, `TIE` when it does not; between two
   runs of one point an apart difference is `CHANGED`. A relative difference's interval stays
   within what a ratio of non-negative figures can be (never below -100%).
4. **Many claims of one kind** (a run's crossovers, `lab compare`'s changed points, per-route
   changes) are one family, corrected for their number by Benjamini-Hochberg (`corrected`,
   statsmodels' `fdr_bh`): where nothing changed (an A/A pair) it promises what Holm's step-down
   promised, at most a 5% chance of any claim in the family; where much changed it calls far
   more of the real changes, at the price that about 5% of the claims made may be false. A single
   comparison (the answer for your app) is not corrected. Each difference carries the p-value
   its own interval implies (`Difference.p`: the level at which the interval would just touch
   zero).

The t quantiles and tails are scipy's (`scipy.special.stdtrit` and `stdtr`, what
`scipy.stats.t.ppf` and `.cdf` compute, without their hundred-fold per-call overhead; exact at any
degrees of freedom, fractional ones included: Welch's are no longer rounded down to a table's
row), Welch's interval and degrees of freedom statsmodels' (`_welch`), the family's correction
statsmodels' (`corrected`).
"""

from __future__ import annotations

import math
import statistics
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from scipy import special
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.weightstats import CompareMeans

from lab.record.flags import excluding, tail_excluding
from lab.record.step import StepRecord
from lab.record.thresholds import T

MIN_BEYOND = T.requests_beyond_percentile  # requests beyond a percentile before it is compared
BUDGET_SHARE = T.generator_lag_p99_share  # the instrument's p99 error: 15% of the p99 ...
BUDGET_MS = T.generator_lag_ms  # ... or 3 ms, whichever is larger (as generator_lag's)
CALIBRATION = Path(__file__).with_name("noise.toml")
METRICS = ("rps", "p99")

TIE, APART, CHANGED = "tie", "apart", "changed"  # the words of every claim
TRIALS, SECONDS, FLOOR, NONE = "trials", "seconds", "seconds+floor", "none"  # interval bases
TOO_FEW = "too few"  # a p99 refused for too few requests beyond it
FLAGGED = "flagged"  # a point that is not a fair result (or whose tail is not the server's)

CORRECTION = "Benjamini-Hochberg-corrected"  # how the words name a family's correction


def t975(df: float) -> float:
    """The 97.5% t quantile at `df` degrees of freedom (inf: the normal's; nan below one)."""
    if math.isnan(df) or df < 1:
        return math.nan
    return float(special.stdtrit(df, 0.975))


@dataclass(frozen=True)
class Floor:
    """Run-to-run relative standard deviation of one single-trial point, from an A/A pair."""

    rps_sd: float
    p99_sd: float
    points: int  # the points of the A/A pair the figures rest on
    runs: tuple[str, ...]  # the A/A runs' ids
    machine: str

    def sd(self, metric: str) -> float:
        """The run-to-run relative SD of `metric` by name; 0 (no floor) for a metric the A/A
        runs did not calibrate (CPU per request, memory per connection, ...)."""
        return {"rps": self.rps_sd, "p99": self.p99_sd}.get(metric, 0.0)

    def point(self, metric: str, value: float, trials: int = 1) -> float:
        """The run-to-run half-width (95%) of one point's `metric`, a mean of `trials` trials."""
        sd = self.sd(metric)
        if self.points < 2 or sd == 0 or math.isnan(value):
            return 0.0
        return t975(self.points) * sd * abs(value) / math.sqrt(max(trials, 1))

    def words(self) -> str:
        """The floor as the summary and `lab compare` state it."""
        if self.points < 2:
            return "no run-to-run floor (intervals from each step's own seconds only)"
        return (
            f"intervals of one trial include a run-to-run floor of {self.rps_sd:.1%} (throughput) "
            f"and {self.p99_sd:.1%} (p99) per point, measured by A/A runs "
            f"{' and '.join(self.runs)} on {self.machine}"
        )


NO_FLOOR = Floor(0.0, 0.0, 0, (), "")


@cache
def floor() -> Floor:
    """The committed calibration (lab/verdict/noise.toml)."""
    with open(CALIBRATION, "rb") as f:
        data = tomllib.load(f)
    runs = tuple(str(r) for r in data["runs"])
    sds = float(data["rps_sd"]), float(data["p99_sd"])
    return Floor(*sds, int(data["points"]), runs, str(data["machine"]))


def calibrate(changes: Sequence[float]) -> float:
    """A run-to-run relative SD per point from an A/A pair's relative changes (B - A) / A: the
    root mean square over sqrt(2), since each change holds two points' noise. The whole change
    is counted as run-to-run, so a step's own noise is inside the floor."""
    xs = [x for x in changes if not math.isnan(x)]
    return math.sqrt(sum(x * x for x in xs) / len(xs) / 2) if xs else 0.0


def beyond(answered: float, percentile: float = 99.0) -> float:
    """Requests that lie beyond `percentile` among `answered`."""
    return answered * (1 - percentile / 100)


def mean_half(xs: Sequence[float]) -> float:
    """The 95% half-width of the mean of `xs` (Student's t; nan for fewer than two)."""
    if len(xs) < 2:
        return math.nan
    return t975(len(xs) - 1) * statistics.stdev(xs) / math.sqrt(len(xs))


@dataclass(frozen=True)
class Side:
    """One point's figure of one metric, ready to compare."""

    metric: str  # "rps", "p99", or any other figure compared (e.g. "cpu_ms_per_req")
    value: float  # the mean of the trials
    trials: tuple[float, ...]
    own_half: float = 0.0  # one trial's half-width from its own seconds (0: none)
    unfit: tuple[str, ...] = ()  # why it is compared with nothing: flags, or TOO_FEW

    def half(self, noise: Floor) -> float:
        """The point's own 95% half-width: its trials', or one trial's seconds and the floor."""
        if len(self.trials) >= 2:
            return mean_half(self.trials)
        return math.hypot(self.own_half, noise.point(self.metric, self.value))

    def basis(self, noise: Floor | None = None) -> str:
        """What the point's own interval rests on (the summary's label of it)."""
        noise = floor() if noise is None else noise
        if len(self.trials) >= 2:
            return TRIALS
        if noise.points >= 2 and noise.sd(self.metric) > 0:
            return FLOOR
        return SECONDS if self.own_half else NONE

    def interval(self, noise: Floor | None = None) -> tuple[float, float]:
        """The point's 95% interval (nan: none), never below zero."""
        half = self.half(floor() if noise is None else noise)
        if not half or math.isnan(half):
            return math.nan, math.nan
        return max(self.value - half, 0.0), self.value + half


def side(records: Sequence[StepRecord], metric: str, more: Sequence[str] = ()) -> Side:
    """One point (a model's trials at one level) as a side of a comparison of `metric`; `more`:
    flags the point carries beside its steps' (a preflight's)."""
    flags = tuple(dict.fromkeys([*more, *(f for r in records for f in r.evidence.flags)]))
    if metric not in METRICS:  # by name: no other figure is read as a p99 (see `figure`)
        raise ValueError(f"a step's side is one of {METRICS}, not {metric!r}")
    if metric == "rps":
        trials = tuple(float(r.load.throughput_rps) for r in records)
        seconds = _seconds(records[0]) if records else []
        own = mean_half(seconds) if len(trials) == 1 and len(seconds) >= 2 else 0.0
        return Side(metric, _mean(trials), trials, own, tuple(excluding(flags)))
    answered = [r for r in records if r.load.ok > 0]
    p99s = [float(r.latency.latency_ms.get("p99", math.nan)) for r in answered]
    return tail(p99s, [r.load.ok for r in records], flags)


def tail(p99s: Sequence[float], answered: Sequence[float], flags: Sequence[str] = ()) -> Side:
    """A p99 side from its trials' p99s and answered requests (the point's, or one route's of a
    mix): compared with nothing where a flag keeps the tail out or the thinnest trial has fewer
    than `MIN_BEYOND` requests beyond it."""
    trials = tuple(x for x in p99s if not math.isnan(x))
    unfit = tuple(tail_excluding(list(flags)))
    if not trials or min((beyond(n) for n in answered), default=0.0) < MIN_BEYOND:
        unfit += (TOO_FEW,)
    return Side("p99", _mean(trials), trials, 0.0, unfit)


def figure(records: Sequence[StepRecord], metric: str, values: Sequence[float | None]) -> Side:
    """Any other per-trial figure of one point (CPU per request, memory per connection: one
    value per record, None where not measured) as a side: the same mean, the same flags, no
    run-to-run floor (the A/A runs calibrated throughput and p99 only)."""
    flags = tuple(f for r in records for f in r.evidence.flags)
    trials = tuple(float(v) for v in values if v is not None and not math.isnan(float(v)))
    return Side(metric, _mean(trials), trials, 0.0, tuple(dict.fromkeys(excluding(flags))))


def _seconds(r: StepRecord) -> list[float]:
    """A step's per-second throughput, less an outage's seconds (flag `stalled`): the outage is
    the event the flag names, not noise that should widen the step's interval into a tie."""
    outage = set(r.evidence.outage_seconds)
    return [float(x) for i, x in enumerate(r.timeseries.get("rps", [])) if i not in outage]


def _mean(xs: Sequence[float]) -> float:
    return statistics.fmean(xs) if xs else math.nan


@dataclass(frozen=True)
class Difference:
    """b - a for one metric: the two values, the 95% interval of their difference (nan: not
    compared) and what the interval rests on."""

    metric: str
    a: float
    b: float
    lo: float
    hi: float
    basis: str
    df: float = math.inf  # the degrees of freedom of the interval's t (inf: normal)

    @property
    def diff(self) -> float:
        return self.b - self.a

    @property
    def compared(self) -> bool:
        return not math.isnan(self.lo)

    @property
    def apart(self) -> bool:
        """The interval of the difference excludes zero."""
        return self.compared and (self.lo > 0 or self.hi < 0)

    @property
    def word(self) -> str:
        return APART if self.apart else TIE if self.compared else self.basis

    @property
    def p(self) -> float:
        """The two-sided p-value the interval implies: the level at which it would just touch
        zero (nan: not compared). Below 0.05 exactly where the interval excludes zero."""
        if not self.compared:
            return math.nan
        half = (self.hi - self.lo) / 2
        if half <= 0:
            return 0.0 if self.diff else 1.0
        return 2 * float(special.stdtr(self.df, -abs(self.diff) / (half / t975(self.df))))

    def relative(self) -> tuple[float, float, float]:
        """(b - a) / a with its interval, never below -100% (nan where a is not positive)."""
        if not self.a > 0 or math.isnan(self.b):
            return math.nan, math.nan, math.nan
        lo = max(self.lo, -self.a) if self.compared else math.nan
        return self.diff / self.a, lo / self.a, self.hi / self.a

    def percent(self) -> str:
        """'+31% [+12%, +50%]'; '+31% [not compared]' where there is no interval."""
        rel, lo, hi = self.relative()
        if math.isnan(rel):
            return "-"
        if not self.compared:
            return f"{rel:+.0%} [not compared]"
        return f"{rel:+.0%} [{lo:+.0%}, {hi:+.0%}]"


def differ(a: Side, b: Side, noise: Floor | None = None) -> Difference:
    """The one test: b - a with its 95% interval (see the module's rules)."""
    noise = floor() if noise is None else noise
    nan = math.nan
    unfit = a.unfit + b.unfit
    if unfit or math.isnan(a.value) or math.isnan(b.value):
        basis = FLAGGED if any(u != TOO_FEW for u in unfit) else TOO_FEW
        return Difference(a.metric, a.value, b.value, nan, nan, basis)
    diff = b.value - a.value
    if min(len(a.trials), len(b.trials)) >= 2:
        (half, df), basis = _welch(a.trials, b.trials), TRIALS
    else:
        half = math.hypot(a.half(noise), b.half(noise))
        floored = noise.points >= 2 and noise.sd(a.metric) > 0
        basis = FLOOR if floored else SECONDS if half else NONE
        df = float(noise.points) if floored else math.inf
    if a.metric == "p99":
        half = max(half, BUDGET_MS, BUDGET_SHARE * max(a.value, b.value))
    elif not half:
        half = T.difference_without_interval_share * max(abs(a.value), abs(b.value))
    return Difference(a.metric, a.value, b.value, diff - half, diff + half, basis, df)


def smallest(metric: str, trials: int, noise: Floor | None = None) -> float:
    """The smallest relative difference between two points of `trials` trials each that this
    test calls apart, where each trial varies run to run as the floor says (its interval just
    touches zero there: a true difference of that size is called about half the time)."""
    noise = floor() if noise is None else noise
    sd = noise.sd(metric)
    if trials >= 2:  # Welch over equal variances: 2n - 2 degrees of freedom
        half = t975(2 * trials - 2) * sd * math.sqrt(2 / trials)
    else:
        half = math.sqrt(2) * t975(noise.points) * sd if noise.points >= 2 else math.nan
    return max(half, BUDGET_SHARE) if metric == "p99" else half


def _welch(a: Sequence[float], b: Sequence[float]) -> tuple[float, float]:
    """Welch's 95% half-width of mean(b) - mean(a), each from two or more trials, and its
    degrees of freedom (Satterthwaite's): statsmodels' `CompareMeans`, which stays quiet on
    nearly equal trials where scipy's `ttest_ind` warns; trials with no spread on either side
    have no interval."""
    if statistics.variance(a) == statistics.variance(b) == 0:
        return 0.0, math.inf
    means = CompareMeans.from_data(b, a)
    lo, hi = means.tconfint_diff(alpha=0.05, usevar="unequal")
    return (float(hi) - float(lo)) / 2, float(means.dof_satt())


def corrected(ps: Sequence[float], alpha: float = 0.05) -> list[bool]:
    """Benjamini-Hochberg over one family of claims (statsmodels' `fdr_bh`): which p-values
    stay claims once corrected for how many were tested (nan: not tested, never a claim, not
    counted). The smallest is held to `alpha` / m, as Holm's first step holds it."""
    tested = [i for i, p in enumerate(ps) if not math.isnan(p)]
    out = [False] * len(ps)
    if tested:
        claims = multipletests([ps[i] for i in tested], alpha=alpha, method="fdr_bh")[0]
        for i, claim in zip(tested, claims, strict=True):
            out[i] = bool(claim)
    return out


PointKey = tuple[str, str, int]  # (model, mode, level rounded): one point of a sweep


def point_key(r: StepRecord) -> PointKey:
    return (r.model, r.mode, round(r.key.level))


def points(records: Sequence[StepRecord]) -> dict[PointKey, list[StepRecord]]:
    """The trials grouped by point, in a fixed order whatever the records'. A skipped step is no
    trial (`StepRecord.is_trial`): a point no step of which was measured is not here at all, so
    it is neither averaged, nor counted among the points a correction counts."""
    out: dict[PointKey, list[StepRecord]] = {}
    for r in sorted(records, key=lambda r: (r.model, r.mode, r.key.level, r.trial)):
        if r.is_trial:
            out.setdefault(point_key(r), []).append(r)
    return out
