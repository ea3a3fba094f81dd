"""The run length a difference needs: how many trials and seconds per step it takes for the one
test of difference (`lab.verdict.difference`) to call a given change apart with 80% power.

Why: the floor says a one-trial run sees about a 10% throughput change and a 28% p99 change; a
user who wants to see a 10% regression was left to guess the run length. The plan reads the same
floor and test, so it cannot promise what the test would not call.

A point's run-to-run relative SD per trial is split in two: what a longer step shrinks (one
second's own spread over the step's seconds, `within_1s` / sqrt(seconds)) and what it does not
(between runs: the machine, the start, the warm-up). From the committed floor alone the split is
unknown and the whole floor is taken as between runs (the cautious reading: longer steps are not
promised to help); from a run's own trials, the seconds' spread is the within part and the rest
of the trials' spread the between part. p99's within part is read from the per-second p99s, a
rough guide (a whole step's p99 is not a mean of seconds); its interval is never narrower than
the instrument's error (`difference.BUDGET_SHARE`), so a p99 change under that is never called.

The change seen with 80% power is the called t plus the 80% t quantile, in standard errors, at
Welch's fewest degrees of freedom (n - 1), the quantiles scipy's (`scipy.special.stdtrit`).
statsmodels' `TTestIndPower` solves the exact power of Student's pooled t (2n - 2 degrees of
freedom), which the lab's test is not: simulated, Welch calls the change it promises for 3
trials only about 70% of the time (78% for 5), where this plan's change is called about 93%
(89%). So the plan is this sum, held never finer than statsmodels' change (tests/test_power.py).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from scipy import special

from lab.record.step import StepRecord
from lab.verdict.difference import (
    BUDGET_SHARE,
    MIN_BEYOND,
    Floor,
    beyond,
    floor,
    points,
    t975,
)

Z80 = float(special.ndtri(0.8))  # the 80% one-sided normal quantile (0.8416)
# The run lengths a plan chooses among; never two trials: Welch's interval then rests on about
# one degree of freedom (t = 12.7), and the normal shortcut for its power promises too much.
TRIALS = (1, *range(3, 11))
SECONDS = (5.0, 10.0, 15.0, 20.0, 30.0, 60.0)
FLOOR_SECONDS = 5.0  # the quick scenario's step, where the committed floor was measured
NAMES = {"rps": "throughput", "p99": "p99"}


@dataclass(frozen=True)
class Spread:
    """One trial's run-to-run relative SD of a metric, split by what a longer step shrinks."""

    metric: str
    between: float  # relative SD that longer steps do not shrink
    within_1s: float  # relative SD of one second's figure: shrinks as 1 / sqrt(seconds)
    seconds: float  # the step length it was measured at
    source: str  # where it was read, in words
    least_s: float = 0.0  # p99: the step length that gives its slowest point enough answers

    def sd(self, seconds: float) -> float:
        return math.hypot(self.between, self.within_1s / math.sqrt(max(seconds, 1e-9)))


@dataclass(frozen=True)
class Plan:
    metric: str
    change: float  # the relative change to see
    trials: int  # 0: none of the lengths considered sees it
    seconds: float
    seen: float  # the smallest change that length sees with 80% power
    family: int = 1  # the points compared together, corrected for their number


def t80(df: float) -> float:
    """The one-sided 80% t quantile at `df` degrees of freedom (nan below one): scipy's."""
    if math.isnan(df) or df < 1:
        return math.nan
    return float(special.stdtrit(df, 0.8))


def called_at(df: float, family: int) -> float:
    """The t a change must reach to be called at the worst among `family` claims corrected
    together, two-sided: 5% / family. Benjamini-Hochberg (`difference.corrected`) holds the
    smallest p-value of a family to 5% / m, as Holm's first step and Bonferroni do, so where one
    point moved among `family` the plan's promise holds; where several moved, each is held to a
    larger share of 5% and the plan is cautious. `t975` for one claim alone."""
    if family <= 1 or math.isnan(df) or df < 1:
        return t975(df)
    return -float(special.stdtrit(df, 0.025 / family))  # the upper tail, by symmetry


def detectable(
    metric: str, sd: float, trials: int, noise: Floor | None = None, family: int = 1
) -> float:
    """The smallest relative change between two points of `trials` trials each that the test
    calls apart with 80% power, each trial's relative SD `sd` (nan: one trial and no floor),
    where the comparison is one of `family` corrected together (`lab compare`'s points)."""
    noise = floor() if noise is None else noise
    if trials >= 2:  # Welch's degrees of freedom lie in [n - 1, 2n - 2]: the fewest, cautious
        df = float(trials - 1)
        se = sd * math.sqrt(2 / trials)
        push = t80(df) * se
    else:  # one trial's interval rests on the floor (`Side.half`), however still the run
        df = float(noise.points) if noise.points >= 2 else math.nan
        push = Z80 * math.sqrt(2) * sd
        se = math.sqrt(2) * max(sd, noise.sd(metric))
    called = called_at(df, family)
    half = called * se
    if metric == "p99":  # the interval is at least the instrument's error of the larger p99,
        share = BUDGET_SHARE * called / t975(df)  # read as a 95% interval, so scaled alike
        return max(half + push, (share + push) / (1 - share))
    return half + push


def floor_spread(metric: str, noise: Floor | None = None) -> Spread:
    """The committed floor as a spread, all of it between runs (see the module's docstring)."""
    noise = floor() if noise is None else noise
    sd = noise.rps_sd if metric == "rps" else noise.p99_sd
    return Spread(metric, sd, 0.0, FLOOR_SECONDS, f"the committed floor ({noise.machine})")


def run_spread(records: Sequence[StepRecord], metric: str, noise: Floor | None = None) -> Spread:
    """A run's own spread: its points' trials (two or more), else the floor, less the seconds'
    share, which longer steps shrink."""
    base = floor_spread(metric, noise)
    series = "rps" if metric == "rps" else "p99_ms"
    within = _median([_cv(r.timeseries.get(series) or []) for r in records])
    seconds = _median([r.duration_s for r in records if r.duration_s > 0]) or base.seconds
    many = [rs for rs in points(records).values() if len(rs) >= 2]
    trials = _median([_cv([_value(r, metric) for r in rs]) for rs in many])
    slowest = min(
        (r.load.throughput_rps for r in records if r.load.throughput_rps > 0), default=0.0
    )
    least = MIN_BEYOND / beyond(slowest) if metric == "p99" and slowest > 0 else 0.0
    own = not math.isnan(trials)
    total, said = (trials, "the run's trials") if own else (base.between, "")
    if math.isnan(within):
        return Spread(metric, total, 0.0, seconds, said or base.source, least)
    at = seconds if own else base.seconds  # the step length the total was measured at
    between = math.sqrt(max(total**2 - within**2 / at, 0.0))
    source = f"{said or base.source}, less its seconds' own spread"
    return Spread(metric, between, within, seconds, source, least)


def plan(change: float, spread: Spread, noise: Floor | None = None, family: int = 1) -> Plan:
    """The shortest run (trials x seconds per step) that sees `change` with 80% power at any
    one of `family` points compared together."""
    fits = [
        (n * s, n, s, seen)
        for n in TRIALS
        for s in SECONDS
        if s >= spread.least_s
        and (seen := detectable(spread.metric, spread.sd(s), n, noise, family)) <= change
    ]
    if not fits:
        longest = detectable(spread.metric, spread.sd(SECONDS[-1]), TRIALS[-1], noise, family)
        return Plan(spread.metric, change, 0, SECONDS[-1], longest, family)
    _, n, s, seen = min(fits)
    return Plan(spread.metric, change, n, s, seen, family)


def plan_words(p: Plan, spread: Spread) -> str:
    """One line: the run length, or why none of those considered sees the change."""
    what = f"a {p.change:.0%} {NAMES[p.metric]} change" + (
        f" at any one of {p.family} points compared together" if p.family > 1 else ""
    )
    basis = f"(spread per trial {spread.sd(p.seconds):.1%}, from {spread.source})"
    if p.metric == "p99":  # compared only with enough answers beyond it (docs/trust.md)
        enough = f"{MIN_BEYOND / beyond(1):,.0f} answers per step or more"
        basis += f"; a p99 needs {enough}" + (
            f": {spread.least_s:.0f} s at this run's slowest point" if spread.least_s else ""
        )
    if not p.trials:
        return (
            f"{what}: not seen with 80% power by {TRIALS[-1]} trials of {p.seconds:g} s; the "
            f"smallest they see is {p.seen:.0%} {basis}"
        )
    trials = f"{p.trials} trial{'s' if p.trials != 1 else ''}"
    return (
        f"{what}: --trials {p.trials} --duration {p.seconds:g} ({trials} of {p.seconds:g} s per "
        f"step; sees {p.seen:.1%} with 80% power) {basis}"
    )


def smallest_seen(records: Sequence[StepRecord], noise: Floor | None = None) -> str:
    """After a run: the smallest throughput and p99 change it could have seen with 80% power,
    at its own trials and step length, at any one of its points when `lab compare` tests them
    all against another run's (corrected for their number)."""
    family = len(points(records))  # the points measured: a skipped step is no trial
    if not family:
        return ""
    trials = len({r.trial for r in records if r.is_trial})
    parts = []
    for metric in ("rps", "p99"):
        spread = run_spread(records, metric, noise)
        seen = detectable(metric, spread.sd(spread.seconds), trials, noise, family)
        parts.append(f"{NAMES[metric]} {seen:.0%}")
    many = f", at any one of its {family} points compared together" if family > 1 else ""
    return (
        f"the smallest change this run could have seen with 80% power ({trials} "
        f"trial{'s' if trials != 1 else ''} of {spread.seconds:.3g} s{many}): {', '.join(parts)} "
        "(`lab plan --detect 10%` says the run length a smaller one needs)"
    )


def _value(r: StepRecord, metric: str) -> float:
    return r.load.throughput_rps if metric == "rps" else r.latency.latency_ms.get("p99", math.nan)


def _cv(xs: Sequence[float]) -> float:
    """Relative SD of `xs` (nan: fewer than two, or a mean that is not positive)."""
    ys = [float(x) for x in xs if x == x]
    if len(ys) < 2 or statistics.fmean(ys) <= 0:
        return math.nan
    return statistics.stdev(ys) / statistics.fmean(ys)


def _median(xs: Sequence[float]) -> float:
    ys = [x for x in xs if not math.isnan(x)]
    return statistics.median(ys) if ys else math.nan
