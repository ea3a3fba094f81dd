"""The target a configuration must meet: an arrival rate, a p99 limit and an error rate.

It is checked on an open-loop step at the target's rate. Open loop, because the question is a
load users bring whatever the server is doing: requests arrive on schedule, latency runs from each
request's intended start, and a request the server could not take counts as dropped, so a server
that falls behind shows it in p99 and errors instead of quietly receiving less (a closed loop's
survivor bias).

"Meets" is the sweep's "tie" read against a target: the step's throughput and p99 are set against
the target's figures by the one test of difference (`lab.verdict.difference`), the target as a
figure with no noise of its own, and a step meets the target unless a figure misses it *beyond
noise* (the interval of the difference lies wholly on the wrong side). It is the rule by which
the sweep names a model tied with the best among the best: a step that cannot be told from
meeting the target is not called short of it. The stricter reading (the whole interval inside the
target) cannot hold for the rate: an open-loop step answers at most what was offered, so its
throughput sits at or just under the rate and its interval always reaches below it. A p99 over the
limit but within noise of it meets, and the words say so ("within noise"). Failed requests are
counted, not estimated: at most `--max-error-rate` of them, exactly. A p99 from too few requests
beyond it to be compared (`MIN_BEYOND`) is held to the limit as measured; a step a flag excludes,
or whose tail a flag says is not the server's, meets nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from lab.record.flags import tail_excluding
from lab.record.step import StepRecord
from lab.verdict.difference import FLAGGED, TOO_FEW, Difference, Side, differ, side


@dataclass(frozen=True)
class Slo:
    """`--rps R --p99-ms L --max-error-rate E`."""

    rps: float
    p99_ms: float
    error_rate: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {"rps": self.rps, "p99_ms": self.p99_ms, "error_rate": self.error_rate}

    @property
    def words(self) -> str:
        errors = f"{self.error_rate:.2%} errors" if self.error_rate else "no errors"
        return f"{self.rps:,g} req/s with p99 <= {self.p99_ms:g} ms and {errors}"

    def misses(self, step: StepRecord) -> list[str]:
        """What `step` misses of the target, with its figures ([] when it meets it)."""
        return [x for x in (unfair(step),) if x] + self.figures_miss(step)

    def figures_miss(self, step: StepRecord, flags: bool = True) -> list[str]:
        """What the step's figures miss (p99, errors, throughput); `flags=False`: as if no flag
        disowned them (what they say where the lab's own apparatus was the limit)."""
        missed = []
        p99 = self.against(step, "p99", flags)
        if not p99_meets(p99):
            missed.append(f"p99 {_p99_words(p99, step)}")
        failed, rate = failures(step)
        if rate > self.error_rate:
            missed.append(f"{failed} failed ({rate:.2%}) > {self.error_rate:.2%}")
        rps = self.against(step, "rps", flags)
        if rps.apart and rps.diff < 0:  # not compared: a flag excludes the step (`unfair`)
            missed.append(
                f"throughput {step.load.throughput_rps:,.0f} req/s short of {self.rps:,g} beyond "
                f"noise ({rps.percent()})"
            )
        return missed

    def against(self, step: StepRecord, metric: str, flags: bool = True) -> Difference:
        """The step's `metric` ("rps" or "p99") less the target's, by the one test; `flags=False`
        compares the figure whatever flags the step carries."""
        measured = side([step], metric)
        if not flags:
            measured = replace(measured, unfit=tuple(u for u in measured.unfit if u == TOO_FEW))
        return differ(exact(metric, self.rps if metric == "rps" else self.p99_ms), measured)


def p99_meets(d: Difference) -> bool:
    """A p99 against its limit: not over it beyond noise; one too thin to compare: not over it as
    measured; nothing answered, or a tail a flag disowns: no."""
    if math.isnan(d.b) or d.word == FLAGGED:
        return False
    if d.word == TOO_FEW:
        return d.b <= d.a
    return not (d.apart and d.diff > 0)


def exact(metric: str, value: float) -> Side:
    """A figure with no noise of its own (a user's target) as a side of the one test: two equal
    trials, so its half-width is zero and the interval of a difference with a measured step is
    the step's alone (against several trials, Welch's test becomes the one-sample t test)."""
    return Side(metric, value, (value, value))


def _p99_words(d: Difference, step: StepRecord) -> str:
    """`312 ms > 250 ms (+25% [+6%, +44%])`, or why it was not compared."""
    if math.isnan(d.b):
        return "none (nothing answered)"
    if d.word == FLAGGED:
        flags = ", ".join(tail_excluding(step.evidence.flags))
        return f"{d.b:,.0f} ms, not the server's alone ({flags})"
    over = f"{d.b:,.0f} ms > {d.a:g} ms"
    return f"{over} ({d.percent()})" if d.compared else f"{over} ({d.basis})"


def unfair(step: StepRecord) -> str:
    """Why the step cannot confirm anything ("" when it can): a flag that keeps it out of the
    verdict (the lab's apparatus saturated, the server died...)."""
    if step.status == "measured" and not step.evidence.excluded_by:
        return ""
    return f"not a fair result ({', '.join(step.evidence.excluded_by or step.evidence.flags)})"


def confirmed(step: StepRecord, slo: Slo) -> str:
    """A step that meets the target, in words with its figures; a p99 over the limit within
    noise says so."""
    failed, _ = failures(step)
    p99 = slo.against(step, "p99", flags=False)
    noise = f" (over {slo.p99_ms:g} ms within noise: {p99.percent()})" if p99.diff > 0 else ""
    return (
        f"p99 {step.latency.latency_ms.get('p99', math.nan):,.1f} ms{noise}, {failed} errors, "
        f"{step.load.throughput_rps:,.1f} of {step.rate_rps or 0:,g} req/s answered"
    )


def failures(step: StepRecord) -> tuple[int, float]:
    """Failed requests (dropped ones and those still unanswered at the cut-off included) and
    their share of the requests due in the window."""
    failed = sum(step.load.errors.values()) + (step.load.unfinished or 0)
    due = step.load.scheduled or step.load.requests
    return failed, failed / due if due else 1.0
