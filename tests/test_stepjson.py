"""The step record's schemas: what is written reads back the same, every older schema reads into
the same record, and a figure lives in exactly one part (`lab.record.step`, `stepparts`,
`stepjson`). Invariants over generated records (Hypothesis), beside examples."""

from __future__ import annotations

import json
from dataclasses import fields, replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lab.record.errors import LabError
from lab.record.step import FIGURES, StepRecord, amended, flat
from lab.record.stepjson import from_json
from lab.record.stepparts import PARTS
from tests.helpers import SETTINGS, point, record

KEY_AND_WINDOW = {f.name for f in fields(StepRecord)} - set(PARTS)


def as_schema_2(record: StepRecord) -> dict[str, object]:
    """The record as schema 2 wrote it: every figure flat, the flags' details as `evidence`."""
    data = json.loads(json.dumps(flat(record)))
    data.update(schema_version=2, evidence=data.pop("details"))
    return data


@SETTINGS
@given(point())
def test_a_written_record_reads_back_the_same(records: list[StepRecord]) -> None:
    for r in records:
        assert from_json(json.loads(r.to_json())) == r


@SETTINGS
@given(point())
def test_a_schema_2_line_reads_into_the_same_record(records: list[StepRecord]) -> None:
    for r in records:
        assert from_json(as_schema_2(r)) == replace(r, schema_version=2)


@SETTINGS
@given(point())
def test_every_figure_lives_in_one_part(records: list[StepRecord]) -> None:
    named = [f.name for part in PARTS.values() for f in fields(part)]
    assert len(named) == len(set(named)) == len(FIGURES)
    assert not set(named) & KEY_AND_WINDOW
    for r in records:
        assert set(flat(r)) == KEY_AND_WINDOW | set(FIGURES)


@SETTINGS
@given(point(), st.sampled_from(FIGURES), st.data())
def test_amended_changes_that_figure_and_nothing_else(
    records: list[StepRecord], name: str, data: st.DataObject
) -> None:
    r = records[0]
    value = data.draw(st.sampled_from(("changed", -7, (), {"k": 1.0})))
    after = flat(amended(r, **{name: value}))
    before = flat(r)
    assert after[name] == value
    assert {k: v for k, v in after.items() if k != name} == {
        k: v for k, v in before.items() if k != name
    }


@pytest.mark.parametrize(
    "change, said",
    [
        ({"load": []}, "a step's load must be a JSON object, got list"),
        ({"evidence": None}, "a step's evidence must be a JSON object, got NoneType"),
        ({"schema_version": 4}, "step schema 4 is not one this lab reads"),
    ],
    ids=["part-not-an-object", "part-missing", "newer-schema"],
)
def test_a_damaged_line_is_one_line_that_says_what(change: dict[str, object], said: str) -> None:
    r = record("a", 100.0, flags=("errors",))
    data = {**json.loads(r.to_json()), **change}
    with pytest.raises(LabError) as caught:
        from_json(data)
    assert said in str(caught.value) and "\n" not in str(caught.value)
