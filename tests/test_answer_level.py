"""The answer's level, over generated sweeps (Hypothesis) against a reference written here:
the heaviest level the models decided, never one where the lab's own limits or the machine kept
a candidate from a result (issue 53), for the answer as it is and for the port's claim. The
examples (the issue's quick run among them) are in tests/test_interfaces.py."""

from __future__ import annotations

import math
import re

import pytest
from hypothesis import given

from analysis.interfaces import answer, claim
from analysis.points import build
from lab.record.flags import FLAGS
from lab.record.step import StepRecord
from lab.verdict.difference import differ, side
from tests.helpers import (
    CLASSES,
    MODELS,
    SETTINGS,
    ref_best,
    ref_mean,
    ref_points,
    sweep,
)


def ref_decided(records: list[StepRecord], models: set[str], users: int) -> bool:
    """Every candidate (a model of `models` the sweep measured at all) has a point at `users`
    and none of its trials there carries a flag the registry says is the lab's or the
    machine's, not the model's (`outside`): the models, not the lab, decided that level."""
    by_point = ref_points(records)
    present = {m for (m, _) in by_point if m in models}
    return all(
        (m, users) in by_point
        and not any(
            FLAGS[f].excludes and FLAGS[f].outside
            for r in by_point[(m, users)]
            for f in r.evidence.flags
            if f in FLAGS
        )
        for m in present
    )


def ref_answer_level(records: list[StepRecord], models: set[str]) -> int | None:
    """The heaviest level the models decided where one has a fair best."""
    levels = {u for (_, u) in ref_points(records)}
    found = [u for u in levels if ref_best(records, models, u) and ref_decided(records, models, u)]
    return max(found, default=None)


@SETTINGS
@given(sweep())
def test_a_claim_compares_two_points_at_the_reference_level(records: list[StepRecord]) -> None:
    """The answer's claim sits at the heaviest level where both groups have a fair best and
    the models decided every candidate's result (issue 53: never a level where the lab's own
    limits or the machine excluded one), with the references' figures; no such level, no claim."""
    levels = {u for (_, u) in ref_points(records)}
    both = [
        u
        for u in levels
        if ref_best(records, {"a", "b"}, u)
        and ref_best(records, {"c", "d"}, u)
        and ref_decided(records, set(MODELS), u)
    ]
    found = claim(build(records), {"a", "b"}, {"c", "d"})
    if not both:
        assert found is None
        return
    assert found is not None and round(found.level) == max(both)
    by_point = ref_points(records)
    for c, group in ((found.ref, {"a", "b"}), (found.other, {"c", "d"})):
        best = ref_best(records, group, max(both))
        if c.model != best:  # picked on p99: tied on throughput, its p99 lower beyond noise
            top = by_point[(best, max(both))]
            assert not differ(side(top, "rps"), c.throughput).apart
            assert differ(c.latency, side(top, "p99")).apart and c.p99_ms < ref_mean(top, "p99")
        assert c.rps == pytest.approx(ref_mean(by_point[(c.model, max(both))], "rps"))
    compared = found.words().split(": ", 1)[1].split("; not at ")[0]  # the levels above: words
    numbers = set(re.findall(r"(?<!\w)[+-]?\d[\d,]*(?:\.\d+)?", compared))
    said = {f"{x:+.0%}"[:-1] for d in found.differences for x in d.relative() if not math.isnan(x)}
    assert numbers <= said, (numbers, said)  # every number the comparison states is its own


@SETTINGS
@given(sweep())
def test_the_answer_names_the_reference_best(records: list[StepRecord]) -> None:
    """At the reference's level: the heaviest the models decided (issue 53), whichever model
    the lab's own limits happened to leave at a heavier one."""
    top = ref_answer_level(records, {"a", "b"})
    lines = answer(build(records), CLASSES, "wsgi")
    if not records:
        assert lines == []
    elif top is None:
        assert "has a fair result" in lines[1]
    elif "picked on p99: tied on throughput with " in lines[1]:  # the reference best, tied
        assert (
            f"picked on p99: tied on throughput with {ref_best(records, {'a', 'b'}, top)},"
            in lines[1]
        )
    else:
        assert f": {ref_best(records, {'a', 'b'}, top)}," in lines[1]
    if top is not None:
        assert lines[1].startswith(f"for your app as it is, at {top} user"), lines[1]
        heavier = [u for (m, u) in ref_points(records) if u > top and m in {"a", "b"}]
        undecided = sorted({u for u in heavier if not ref_decided(records, {"a", "b"}, u)})
        for u in undecided:  # each heavier level the lab decided is said, and for whom
            assert f"at {u} user{'s' if u > 1 else ''} the lab's own limits" in lines[1]
