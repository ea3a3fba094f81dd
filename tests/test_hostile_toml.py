"""Property-based hostile input: random TOML documents for the scenario and models schemas load,
or fail with a one-line LabError, never with any other exception."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lab.config.models import load_registry
from lab.config.scenario import SCENARIO_TYPES, UPSTREAM_TYPES, load_scenario
from lab.record.errors import LabError
from tests.hostile_input import models_doc, toml_doc

SCALARS = st.one_of(
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.text(max_size=20),
    st.just("[/x]"),
    st.just("{port[0]}"),
    st.just("::1"),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
SCENARIO_KEYS = st.sampled_from([*SCENARIO_TYPES, "zzz"])
MODEL_KEYS = st.sampled_from(["description", "app", "unit", "argv", "env", "baseline", "knobs"])
PROPERTY = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def loads_cleanly(load: Callable[[Path], Any], path: Path, text: str) -> None:
    """Accepted, or a LabError naming the file: any other exception fails the property."""
    path.write_text(text)
    try:
        load(path)
    except LabError as e:
        assert str(e).strip() and "\n" not in str(e).strip()


@PROPERTY
@given(
    doc=st.dictionaries(SCENARIO_KEYS, VALUES, max_size=6),
    upstream=st.dictionaries(st.sampled_from([*UPSTREAM_TYPES, "x"]), VALUES, max_size=3),
)
def test_random_scenario_documents(tmp_path, doc, upstream):
    if upstream:
        doc["upstream"] = upstream
    loads_cleanly(lambda p: load_scenario(str(p)), tmp_path / "s.toml", toml_doc(doc))


@PROPERTY
@given(
    table=st.dictionaries(MODEL_KEYS, VALUES, max_size=7),
    name=st.sampled_from(["mine", "a b", "../x", "x" * 70, "ok"]),
)
def test_random_models_documents(tmp_path, table, name):
    loads_cleanly(load_registry, tmp_path / "m.toml", models_doc({name: table}))


@PROPERTY
@given(text=st.text(max_size=300))
def test_random_text_as_toml(tmp_path, text):
    loads_cleanly(lambda p: load_scenario(str(p)), tmp_path / "t.toml", text)
    loads_cleanly(load_registry, tmp_path / "m.toml", text)
