"""A step's verdict: the first rule that fires names its limit and decides its comparison.

`assessed` is what the run calls on every step record: it derives the facts once, applies the
rule table, and writes back the limit, its reason and advice, the secondary evidence (every
later rule that fired), the flags the rules raise (`lab_limited`, `capped`,
`capped_unexplained`, `failed_tail`), and the cost per request. The flags are how every reader
(the judge, the metrics, the comparison) learns whether the step may be compared, so fairness
comes from the rule that named the limit, not from a second system beside it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lab.record.step import StepRecord, amended
from lab.verdict import owners
from lab.verdict.capacity import Capacity, Cost, cost
from lab.verdict.facts import (
    Facts,
    facts_of,
    inferred_inflight,
    offered_concurrency,
    upstream_inflight,
)
from lab.verdict.rules import TAIL, Finding, Rule
from lab.verdict.table import RULES

# Flags the rules raise: an assessed record is assessed again from what was measured only.
RAISED_BY_RULES = frozenset(rule.flag for rule in RULES if rule.flag)
QUIET = ("none", "unknown")  # limits that say nothing as secondary evidence


@dataclass(frozen=True)
class Verdict:
    rule: Rule  # the first rule that fired: the step's limit
    finding: Finding
    secondary: tuple[tuple[Rule, Finding], ...]  # every later rule that fired

    def also(self) -> tuple[str, ...]:
        """The secondary limits, each once, the primary one left out."""
        found = dict.fromkeys(rule.limit for rule, _ in self.secondary)
        return tuple(limit for limit in found if limit != self.rule.limit)

    def raised(self) -> dict[str, Any]:
        """Flag -> evidence: the primary rule's flag, and every tail rule's wherever it fired,
        each with its rule, limit and reason beside the figures the reason quotes."""
        out: dict[str, Any] = {}
        for rule, found in ((self.rule, self.finding), *self.secondary):
            if rule.flag and (rule is self.rule or rule.effect == TAIL):
                out[rule.flag] = {**_words(rule, found), **(found.evidence or {})}
        return out


def _words(rule: Rule, found: Finding) -> dict[str, Any]:
    return {"rule": rule.name, "limited_by": rule.limit, "reason": found.reason}


def verdict(f: Facts) -> Verdict:
    fired = [(rule, found) for rule in RULES if (found := rule.check(f)) is not None]
    (rule, finding), *rest = fired  # the last rule always fires
    secondary = tuple((r, x) for r, x in rest if r.limit not in QUIET)
    return Verdict(rule, finding, secondary)


def assessed(record: StepRecord, capacity: Capacity) -> StepRecord:
    """The record with its limit, its advice, its secondary evidence, the flags its rules
    raise and its cost per request."""
    measured = amended(
        record, flags=tuple(f for f in record.evidence.flags if f not in RAISED_BY_RULES)
    )
    f = facts_of(measured, capacity)
    v = verdict(f)
    raised = v.raised()
    spent = step_cost(measured, capacity)
    also = [{"limited_by": r.limit, "rule": r.name, "reason": x.reason} for r, x in v.secondary]
    evidence = _advised(measured, v) | raised
    if also:
        evidence["also_limited_by"] = also
    return amended(
        measured,
        flags=tuple(dict.fromkeys((*measured.evidence.flags, *raised))),
        details=evidence,
        inferred_inflight=round(inferred_inflight(measured, capacity.delay_ms), 1),
        limited_by=v.rule.limit,
        limit_reason="; ".join(filter(None, (v.finding.reason, _where(measured, v)))),
        limit_rule=v.rule.name,
        limit_advice=v.rule.advice,
        also_limited_by=tuple(
            x for x in dict.fromkeys(r.limit for r, _ in v.secondary) if x != v.rule.limit
        ),
        server_cores=capacity.cores,
        **vars(spent),  # the cost per request, field for field: Cost's names are the record's
    )


def _where(r: StepRecord, v: Verdict) -> str:
    """Where the server's time went, from its sampled stacks (`lab run --profile`)."""
    return owners.said(r.evidence.details.get("profile"), v.rule.limit)


def step_cost(r: StepRecord, cap: Capacity) -> Cost:
    held = offered_concurrency(r) if r.mode == "closed" else max(upstream_inflight(r), 0)
    return cost(r, cap, held)


def _advised(r: StepRecord, v: Verdict) -> dict[str, Any]:
    """The evidence, with a saturated apparatus's advice the one that can help: the rule's own
    where the apparatus is the limit, else the limit that more generators cannot lift."""
    ev = r.evidence.details.get("apparatus_saturated")
    if not isinstance(ev, dict):
        return dict(r.evidence.details)
    said = v.rule.advice if v.rule.limit == "apparatus" else v.finding.reason
    return {**r.evidence.details, "apparatus_saturated": {**ev, "advice": said}}
