"""Placeholders (`lab.record.placeholders`): what is one and what is refused, and where a
`{line:FILE}` of a mix file is read from."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lab.config import mixfile
from lab.config.userapp import Route
from lab.record import placeholders
from lab.record.errors import LabError


@pytest.mark.parametrize(
    "path,said",
    [
        ("/x/{orderId}", "unknown placeholder {orderId}"),
        ("/x/{order-id}", "unknown placeholder {order-id}"),
        ("/x/{UUID}", "placeholders are lowercase: {uuid}"),
        ("/x/{uuid", "never closes"),
        ("/x/{choice:a|b", "never closes"),
    ],
    ids=["camel-case", "dashed", "upper-case", "unclosed", "unclosed-choice"],
)
def test_a_word_in_braces_that_is_no_placeholder_is_refused(path: str, said: str) -> None:
    """The docs promise any other `{word}` is refused: a path copied from an OpenAPI page
    (`/orders/{orderId}`) was once sent with its braces, as was an unclosed `{uuid`."""
    with pytest.raises(LabError) as e:
        placeholders.compile_text(path, "--path")
    assert said in str(e.value) and "\n" not in str(e.value)


BRACELESS = st.text(st.characters(blacklist_characters="{}"), max_size=5)


@settings(max_examples=200, deadline=None)
@given(
    st.recursive(st.integers() | BRACELESS, lambda c: st.dictionaries(BRACELESS, c | st.lists(c)))
)
def test_json_braces_are_never_a_placeholder(value: Any) -> None:
    """A JSON object's brace is followed by a quote, a space or its closing brace, never a
    letter: a JSON body whose strings hold no brace compiles as the very same text (a brace
    inside a string is the text's own: there a placeholder is one)."""
    text = json.dumps(value)
    assert placeholders.compile_text(text, "b", "json").static


def test_line_files_are_read_beside_the_mix_file(tmp_path: Path, monkeypatch: Any) -> None:
    """`{line:FILE}` is read relative to the mix file, as `body_file` is, whatever directory
    `lab run` runs in: the route carries the absolute path, for every process that fills it."""
    home = tmp_path / "mixes"
    home.mkdir()
    (home / "ids.txt").write_text("7\n8\n")
    text = '[[route]]\npath = "/o/{line:ids.txt}"\nheaders = { X-Id = "{line:ids.txt}" }\n'
    monkeypatch.chdir(tmp_path)  # ids.txt is not in the working directory
    (home / "mix.toml").write_text(text)
    (route,) = mixfile.read(home / "mix.toml", None, ())
    assert route.route.path == f"/o/{{line:{home / 'ids.txt'}}}"
    assert ("X-Id", f"{{line:{home / 'ids.txt'}}}") in route.route.headers
    drawn = placeholders.Values(placeholders.Source(seed=1), 1).fill_text(route.route.path, "path")
    assert drawn in ("/o/7", "/o/8")


WORD = st.from_regex(r"[A-Za-z][A-Za-z0-9_-]{0,8}", fullmatch=True)


@settings(max_examples=200, deadline=None)
@given(WORD, st.booleans())
def test_any_other_word_in_braces_is_refused(word: str, closed: bool) -> None:
    """Whatever the word's case or spelling: `{word}` that names no placeholder, and `{word`
    left unclosed, are refused in one line; never sent with their braces."""
    text = f"/x/{{{word}}}" if closed else f"/x/{{{word}"
    if closed and word in placeholders.NAMES and word not in ("choice", "line"):
        assert not placeholders.compile_text(text, "p").static
        return
    with pytest.raises(LabError) as e:
        placeholders.compile_text(text, "p")
    assert "\n" not in str(e.value)


def test_the_check_draws_the_same_choices_under_every_model() -> None:
    """The check reseeds its draws before each model: both models are asked the same searches
    in the same order (a search for 'task' under one and 'note' under the next answered
    different pages, and the app was refused as answering differently), while {n} goes on."""
    route = Route("GET", "/search?q={choice:task|note|other|more}&n={n}")
    source = placeholders.Source(base=1)
    runs = []
    for _ in range(2):
        source.reseed(placeholders.CHECK_SEED)
        runs.append([route.filled(source).path for _ in range(8)])
    first, second = runs
    assert [p.split("&")[0] for p in first] == [p.split("&")[0] for p in second]
    assert len({p.split("&")[0] for p in first}) > 1  # still drawn per request
    assert not set(first) & set(second)  # every {n} its own
