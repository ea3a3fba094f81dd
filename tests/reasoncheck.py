"""Every number in a step's reason is in its evidence (issue 38): the check, shared by
tests/test_reason_evidence.py (over generated step records) and tests/test_clusters.py.

Each number the reason prints must be one of the figures it rests on: the measured record's own
figures (its fields, latencies, errors, series and its flags' evidence, numbers quoted in that
evidence's words too), what the knobs allow (`Capacity`, its knob in words) or the fired rule's
own evidence dict, where a rule puts every figure it derives.

The tolerance is the printing: a printed number matches a figure that rounds to it at the
printed precision (half a unit of its last digit: "12.5" is within 0.05 of the figure, "85"
within 0.5, "1.2e+02" within 5), and a number printed with "%" may also be a share (the figure
x 100). No other arithmetic is allowed: a derived number belongs in the rule's evidence.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import asdict
from typing import Any

from lab.record.step import StepRecord
from lab.verdict.assess import assessed, verdict
from lab.verdict.capacity import Capacity
from lab.verdict.facts import facts_of

# A number as the rules print it: thousands separators, decimals, an exponent (`:g`, `.2g`),
# not a digit inside a word (p50, http_5xx); a "%" after it says it may be a share.
NUMBER = re.compile(
    r"(?<![\w.,])(?P<n>-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.(?P<dec>\d+))?(?:e(?P<exp>[+-]\d+))?)"
    r"(?![\w])(?P<pct>%)?"
)


def printed(reason: str) -> Iterator[tuple[str, float, float, bool]]:
    """Each number in `reason`: its text, value, half a unit of its last digit, and "%"."""
    for m in NUMBER.finditer(reason):
        places = len(m["dec"] or "") - int(m["exp"] or 0)
        yield m["n"], float(m["n"].replace(",", "")), 0.5 * 10.0**-places, bool(m["pct"])


def figures(value: Any, words: bool) -> Iterator[float]:
    """Every number in `value`, walked through dicts and lists; in strings where `words`."""
    if isinstance(value, bool):
        return
    if isinstance(value, int | float):
        yield float(value)
    elif isinstance(value, dict):
        for v in value.values():
            yield from figures(v, words)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from figures(v, words)
    elif isinstance(value, str) and words:
        yield from (x for _, x, _, _ in printed(value))


def evidence_of(measured: StepRecord, cap: Capacity, found: dict[str, Any] | None) -> list[float]:
    """The figures a reason may quote: the measured record's, the capacity's, the rule's."""
    record = asdict(measured)
    quoted = record.pop("evidence")
    pool = [*figures(record, False), *figures(quoted, True), *figures(found or {}, True)]
    pool += [*figures(asdict(cap), True)]
    return [x for x in pool if math.isfinite(x)]


def matches(value: float, half: float, share: bool, pool: list[float]) -> bool:
    """`value` is some figure of the pool rounded to its printed precision (x 100 for a %)."""
    slack = half * (1 + 1e-9) + 1e-9
    return any(abs(x - value) <= slack or (share and abs(100 * x - value) <= slack) for x in pool)


def check(measured: StepRecord, cap: Capacity) -> None:
    """Every number of the assessed record's reason, and of each secondary reason it keeps, is
    in that rule's evidence; a flag the rule raises keeps that evidence in the record."""
    record = assessed(measured, cap)
    v = verdict(facts_of(measured, cap))
    assert (v.rule.name, v.finding.reason) == (
        record.evidence.limit_rule,
        record.evidence.limit_reason,
    )
    kept = [x["reason"] for x in record.evidence.details.get("also_limited_by", ())]
    assert kept == [found.reason for _, found in v.secondary]
    for rule, found in ((v.rule, v.finding), *v.secondary):
        # never a figure that says nothing: not a number, "about 0 requests", "()"
        assert not re.search(r"\b(nan|inf)\b|about 0 |\(\)", found.reason), found.reason
        pool = evidence_of(measured, cap, found.evidence)
        for text, value, half, share in printed(found.reason):
            assert matches(value, half, share, pool), (rule.name, text, found.reason)
    if v.rule.flag and v.finding.evidence:
        stored = record.evidence.details[v.rule.flag]
        assert stored == {**stored, **v.finding.evidence}, (v.rule.flag, stored)
