"""One word per meaning: `processes` are server processes (gunicorn's, uvicorn's and Granian's
`--workers`), `concurrency` is what one process serves at once. The old knob name `workers` is
still read everywhere a knob can be given, and a note says what it is now, so a gunicorn user's
`--knob workers=4` never silently becomes one process of four greenlets."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from lab.config.models import Knobs, alias_notes, canonical_knobs, load_registry
from lab.record.errors import LabError
from tests.helpers import lab_cli

OLD_MODELS_FILE = """
[models.old-threads]
description = "a models file written before the rename"
app = "wsgi"
unit = "thread"
argv = ["{bindir}/uwsgi", "--processes", "{processes}", "--threads", "{workers}"]
[models.old-threads.knobs]
workers = { min = 3, why = "three at least" }
"""


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ({"workers": 4}, {"concurrency": 4}),
        ({"concurrency": 4, "processes": 2}, {"concurrency": 4, "processes": 2}),
        ({"workers": "auto"}, {"concurrency": "auto"}),
    ],
    ids=["old-name", "new-name", "auto"],
)
def test_the_old_name_is_read_as_the_new(given: dict, expected: dict) -> None:
    assert canonical_knobs(given, "--knob") == expected
    assert Knobs().updated(given, "--knob").resolve(10).concurrency == (
        10 if expected["concurrency"] == "auto" else expected["concurrency"]
    )


def test_both_names_at_once_is_a_usage_error() -> None:
    with pytest.raises(LabError, match="workers and concurrency are the same knob"):
        Knobs().updated({"workers": 4, "concurrency": 8}, "--knob")


def test_the_note_tells_a_gunicorn_user_where_processes_went() -> None:
    (note,) = alias_notes({"workers": 4})
    assert "concurrency" in note and "processes" in note and "--workers" in note
    assert note.endswith("concurrency=4") and "\n" not in note
    assert alias_notes({"concurrency": 4}) == []


def test_a_models_file_with_the_old_placeholder_and_limit_still_loads(tmp_path: Path) -> None:
    path = tmp_path / "old.toml"
    path.write_text(OLD_MODELS_FILE)
    model = load_registry(path).models["old-threads"]
    knobs = Knobs(concurrency=2).resolve(2)
    argv = model.command(knobs, "127.0.0.1", 8000)
    assert argv[argv.index("--threads") + 1] == "3"  # the old-named minimum, applied
    assert model.capacity(knobs) == 3


def test_lab_run_prints_the_note_before_anything_starts(tmp_path: Path) -> None:
    """`--out` that cannot be written stops the run before any process starts (exit 3), after
    the knobs were read: the note is on screen, one line."""
    blocker = tmp_path / "file"
    blocker.write_text("")
    argv = lab_cli("run", "--models", "uwsgi-threads", "--knob", "workers=4")
    done = subprocess.run(
        [*argv, "--out", str(blocker / "out")], capture_output=True, text=True, timeout=120
    )
    said = done.stdout + done.stderr
    assert done.returncode == 3, said
    assert "note: knob workers is now concurrency" in " ".join(said.split()), said
