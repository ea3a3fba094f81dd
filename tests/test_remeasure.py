"""Which records stand when a step was measured again, and what is owed a measurement again.

`standing` decides, for every reader, which record of a step is its figure: a step the lab failed
to measure (owed) or kept from a result (`Flag.outside`) is superseded by a later record of the
same step, or by one that is neither. Held over generated sequences against a reference written
here, beside examples; the real re-measure of a run is in tests/test_reliability.py.
"""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from lab.record.flags import FLAGS
from lab.record.rundir import standing
from lab.record.step import StepRecord
from lab.run.remeasure import Budget, in_order, owed_again
from tests.helpers import record

KINDS = ((), ("lab_limited",), ("interrupted",), ("loadgen_failed",), ("serialized",), ("errors",))


def again(r: StepRecord) -> bool:
    """The reference's reading of the registry: owed or the lab's/machine's."""
    return any(f in ("interrupted", "loadgen_failed") or FLAGS[f].outside for f in r.evidence.flags)


def ref_standing(records: list[StepRecord]) -> list[StepRecord]:
    out = []
    for i, r in enumerate(records):
        same = [s for s in records if s.key == r.key]
        settled = [s for s in same if not again(s)]
        later = [s for s in records[i + 1 :] if s.key == r.key]
        if not again(r) or (not settled and not later):
            out.append(r)
    return out


sequences = st.lists(
    st.tuples(st.sampled_from(("a", "b")), st.sampled_from((1, 10)), st.sampled_from(KINDS)),
    max_size=8,
)


def records_of(drawn: list[tuple[str, int, tuple[str, ...]]]) -> list[StepRecord]:
    return [record(m, 100.0 + i, users=u, flags=f) for i, (m, u, f) in enumerate(drawn)]


@settings(max_examples=200, deadline=None)
@given(sequences)
def test_the_standing_records_are_the_references(drawn: list) -> None:
    records = records_of(drawn)
    kept = standing(records)
    assert kept == ref_standing(records)
    for key in {r.key for r in records}:  # a step measured again is never two trials of it
        mine = [r for r in kept if r.key == key]
        assert len(mine) >= 1
        assert not (len(mine) > 1 and any(again(r) for r in mine))


@settings(max_examples=200, deadline=None)
@given(sequences)
def test_what_is_owed_again_is_every_standing_step_the_lab_kept_from_a_result(drawn: list) -> None:
    records = records_of(drawn)
    owed = owed_again(records)
    said = {k for o in owed for k in o.keys}
    assert said == {
        r.key for r in standing(records) if any(FLAGS[f].outside for f in r.evidence.flags)
    }
    for o in owed:
        assert all(k.model == o.model and k.trial == o.trial for k in o.keys)
        assert list(o.keys) == sorted(o.keys, key=lambda k: k.level)


def test_a_step_measured_again_and_fair_supersedes_the_first() -> None:
    first = record("a", 50.0, users=200, flags=("lab_limited",))
    later = record("a", 90.0, users=200)
    other = record("b", 80.0, users=200)
    assert standing([first, other, later]) == [other, later]
    assert owed_again([first, other, later]) == []
    (owed,) = owed_again([first, other])
    assert (owed.model, owed.trial, owed.keys) == ("a", 1, (first.key,))


def test_a_step_still_disturbed_the_second_time_stands_as_the_last() -> None:
    first = record("a", 50.0, users=200, flags=("lab_limited",))
    second = record("a", 60.0, users=200, flags=("lab_limited",))
    assert standing([first, second]) == [second]


def test_the_order_is_a_shuffle_and_the_budget_holds() -> None:
    owed = owed_again([record(m, 1.0, flags=("lab_limited",)) for m in "abcd"])
    shuffled = in_order(owed, random.Random(1))
    assert sorted(o.model for o in shuffled) == ["a", "b", "c", "d"]
    budget = Budget(10.0)
    assert budget.fits(10.0) and not budget.fits(10.5)
    budget.spend(6.0)
    assert budget.fits(4.0) and not budget.fits(4.5)
