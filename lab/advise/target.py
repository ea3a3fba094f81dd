"""The target a configuration must meet: an arrival rate, a p99 limit and an error rate.

It is checked on an open-loop step at the target's rate. Open loop, because the question is a
load users bring whatever the server is doing: requests arrive on schedule, latency runs from each
request's intended start, and a request the server could not take counts as dropped, so a server
that falls behind shows it in p99 and errors instead of quietly receiving less (a closed loop's
survivor bias).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from lab.record.step import StepRecord
from lab.record.thresholds import T

THROUGHPUT_SHARE = T.advise_throughput_share  # of the target rate: what a confirming step answers


@dataclass(frozen=True)
class Slo:
    """`--rps R --p99-ms L --error-rate E`."""

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

    def figures_miss(self, step: StepRecord) -> list[str]:
        """What the step's figures miss (p99, errors, throughput), fair or not."""
        missed = []
        p99 = step.latency_ms.get("p99", math.nan)
        if not p99 <= self.p99_ms:  # nan (nothing answered) misses too
            missed.append(f"p99 {p99:,.0f} ms > {self.p99_ms:g} ms")
        failed, rate = failures(step)
        if rate > self.error_rate:
            missed.append(f"{failed} failed ({rate:.2%}) > {self.error_rate:.2%}")
        if step.throughput_rps < THROUGHPUT_SHARE * self.rps:
            missed.append(
                f"throughput {step.throughput_rps:,.0f} req/s < {THROUGHPUT_SHARE:.0%} of "
                f"{self.rps:,g}"
            )
        return missed


def unfair(step: StepRecord) -> str:
    """Why the step cannot confirm anything ("" when it can): a flag that keeps it out of the
    verdict (the lab's apparatus saturated, the server died...)."""
    if step.status == "measured" and not step.excluded_by:
        return ""
    return f"not a fair result ({', '.join(step.excluded_by or step.flags)})"


def confirmed(step: StepRecord) -> str:
    """A step that meets the target, in words with its figures."""
    failed, _ = failures(step)
    return (
        f"p99 {step.latency_ms.get('p99', math.nan):,.1f} ms, {failed} errors, "
        f"{step.throughput_rps:,.1f} of {step.rate_rps or 0:,g} req/s answered"
    )


def failures(step: StepRecord) -> tuple[int, float]:
    """Failed requests (dropped ones and those still unanswered at the cut-off included) and
    their share of the requests due in the window."""
    failed = sum(step.errors.values()) + (step.unfinished or 0)
    due = step.scheduled or step.requests
    return failed, failed / due if due else 1.0
