"""Bodies compared by what must match (lab.run.bodyshape): invariants over generated bodies, and
the cases a real app answers (JSON echoes, tokens, timestamps, the server's own port)."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from lab.run import bodyshape

TEXT = st.text(alphabet=st.sampled_from("ab01 <>/=\"'\n-:x9Z_"), max_size=60)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=10,
)


@settings(max_examples=300, deadline=None)
@given(TEXT, TEXT)
def test_a_template_fits_both_answers_it_was_learnt_from(a: str, b: str) -> None:
    template = bodyshape.learn(a, b, "text/html", "shape")
    assert template.check(a) == "" and template.check(b) == ""
    assert (template.varied == "") == (a == b)


@settings(max_examples=200, deadline=None)
@given(TEXT, TEXT)
def test_exact_fits_the_first_answer_and_only_its_bytes(a: str, b: str) -> None:
    template = bodyshape.learn(a, a, "text/plain", "exact")
    assert template.check(a) == ""
    assert (template.check(b) == "") == (a == b)


@settings(max_examples=300, deadline=None)
@given(JSON, JSON)
@example({}, {"": None, "?": []})  # a key named "?" once read as "" made optional
def test_merged_json_shapes_accept_both(a: Any, b: Any) -> None:
    template = bodyshape.learn(json.dumps(a), json.dumps(b), "application/json", "shape")
    assert template.check(json.dumps(a)) == "" and template.check(json.dumps(b)) == ""


@pytest.mark.parametrize(
    ("first", "second", "other", "differs"),
    [
        ('{"id": "a1", "n": 1}', '{"id": "b2", "n": 2.5}', '{"id": "c3", "n": 7}', ""),
        ('{"id": "a1"}', '{"id": "b2"}', '{"id": 3}', "$.id: number, expected str"),
        ('{"a": {"b": [1]}}', '{"a": {"b": []}}', '{"a": {"b": ["x"]}}', "$.a.b[]: str"),
        ('{"a": 1}', '{"a": 2}', '{"a": 1, "b": 2}', "$.b: not expected"),
        ('{"a": 1, "b": 2}', '{"a": 1}', '{"a": 5}', ""),  # b varied by itself: optional
        ('{"a": 1}', '{"a": 1}', "[1]", "$: a list, expected an object"),
    ],
    ids=["values-vary", "type-differs", "item-type", "extra-key", "optional-key", "not-object"],
)
def test_json_by_keys_and_types(first: str, second: str, other: str, differs: str) -> None:
    template = bodyshape.learn(first, second, "application/json; charset=utf-8", "shape")
    found = template.check(other)
    assert found.startswith(differs) if differs else found == ""


@pytest.mark.parametrize(
    ("first", "second", "other", "fits"),
    [
        (
            '<input name="csrf" value="Zx81kq_A">',
            '<input name="csrf" value="9fQ-pLw2">',
            '<input name="csrf" value="mN0pQr">',
            True,
        ),
        ("at 13:42:30 id 3f2a-9c", "at 13:42:31 id 77b0-1d", "at 09:01:02 id zz-0", True),
        ("hello {server}", "hello {server}", "hello {server}", True),
        ("<p>ok</p>", "<p>ok</p>", "<p>error</p>", False),
        ("token=abc;", "token=xyz;", "token=abc", False),
    ],
    ids=["csrf-token", "timestamp-and-id", "own-address", "stable-text-differs", "lost-tail"],
)
def test_text_by_what_is_stable(first: str, second: str, other: str, fits: bool) -> None:
    template = bodyshape.learn(first, second, "text/html", "shape")
    assert (template.check(other) == "") == fits


def test_the_servers_own_address_is_one_placeholder() -> None:
    body = b'{"url": "http://127.0.0.1:41234/get"}'
    read = bodyshape.own_address_read(body, "127.0.0.1:41234")
    assert read == '{"url": "http://{server}/get"}'


def test_a_large_page_whose_ids_vary_in_place_keeps_its_stable_text() -> None:
    """Many more tokens than difflib is given, a UUID in every row: compared position by
    position, every row's stable text still counts, and a third answer fits."""

    def page() -> str:
        rows = "".join(f"<tr><td>row {i}</td><td>{uuid.uuid4()}</td></tr>" for i in range(4000))
        return f"<table>{rows}</table>"

    template = bodyshape.learn(page(), page(), "text/html", "shape")
    assert template.check(page()) == ""
    assert template.check(page().replace("<td>row", "<td>ROW", 1)) != ""
