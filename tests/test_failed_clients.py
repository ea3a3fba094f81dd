"""A client that measured nothing (missing, broken, not one answer) is a failed row: shown so,
owed, never a ratio and never cited by a conclusion; tools are checked before an experiment
starts. Hand-built rows first, then `lab reproduce uwsgi-blog` with a broken `ab` first on PATH,
then `lab run` records, where a step whose generator gave no result is owed."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest
from rich.console import Console

from experiments import apachebench, uwsgi_blog
from experiments.common import Row, no_answer, reproduce, unexplained
from lab.cli.reproduce import EXPERIMENTS
from lab.record.rundir import RunDir
from lab.record.step import Measured, Raised, StepKey, step_record

LOADER_ERROR = "ab: error while loading shared libraries: libapr-1.so.0: cannot open shared object"
BROKEN_AB = f"""#!/bin/sh
echo "{LOADER_ERROR} file: No such file or directory" >&2
exit 127
"""
# Says its version, as a working ab would, then fails every real run: the check passes and the
# failure is found in the result (nothing answered).
SILENT_AB = """#!/bin/sh
case "$1" in -V) echo "This is ApacheBench, Version 2.3"; exit 0;; esac
echo "apr_socket_connect(): Connection refused (111)" >&2
exit 1
"""


@pytest.fixture()
def fake_ab(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> str:
    """An `ab` script first on PATH (the children inherit it)."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    script = bindir / "ab"
    script.write_text(request.param)
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    return str(request.param)


def test_a_failed_row_has_no_ratio_and_is_owed() -> None:
    row = Row.of_failure("threads 1000, ab", "time taken for tests", "s", 35.7, "ab broken")
    assert row.ratio() is None and not row.gap() and row.measured == "failed: ab broken"
    assert row.to_dict()["failed"] == "ab broken"
    assert unexplained([row]) == ["threads 1000, ab: time taken for tests failed (ab broken)"]


@pytest.mark.parametrize(
    ("result", "failed"),
    [
        ({"ok": 0, "n": 2000, "ab_aborted": "apr_pollset_poll: timeout"}, "0/2000 ok"),
        ({"ok": 0, "n": 100}, "not one request answered"),
        ({"failed": "ab is not on PATH"}, "ab is not on PATH"),
        ({"ok": 3, "n": 100}, ""),
    ],
    ids=["ab-aborted", "nothing-answered", "failed-before", "answered"],
)
def test_no_answer_says_why(result: dict, failed: str) -> None:
    why = no_answer(result)
    assert (failed in why) if failed else why == ""


@pytest.mark.procs  # probes a real binary (tests/tiers.py cannot see it by name)
@pytest.mark.parametrize("fake_ab", [BROKEN_AB], indirect=True, ids=["exits-127"])
def test_a_broken_ab_is_found_before_the_experiment(fake_ab: str) -> None:
    why = apachebench.missing()
    assert why is not None and "exited 127" in why and "libapr" in why


def _ab_cases() -> tuple[uwsgi_blog.Case, ...]:
    cases = [c for c in uwsgi_blog.CASES if c.client == "ab" and not c.docker]
    return uwsgi_blog.scaled_cases(100, tuple(replace(c, settings=()) for c in cases))


@pytest.mark.parametrize(
    ("fake_ab", "said"),
    [(BROKEN_AB, "exited 127"), (SILENT_AB, "not one request answered")],
    indirect=["fake_ab"],
    ids=["broken-before", "nothing-answered"],
)
def test_reproduction_rows_of_a_failed_client_are_failed(
    fake_ab: str, said: str, tmp_path: Path
) -> None:
    protocol = uwsgi_blog.Protocol(
        sleep_s=0.05, cases=_ab_cases(), deadline_s=10, seconds_sleep_s=0.05, seconds_deadline_s=10
    )
    console = Console(file=(tmp_path / "out.txt").open("w"), width=200)
    path = reproduce(EXPERIMENTS["uwsgi-blog"], "test", tmp_path, protocol, console)
    table = json.loads((path / "reproduction.json").read_text())
    assert len(table["rows"]) == 2
    for row in table["rows"]:
        assert row["measured"].startswith("failed: ") and said in row["failed"], row
        assert row["ratio"] is None and row["gap"] is False
    assert len([g for g in table["unexplained_gaps"] if "failed" in g]) == 2
    conclusion = table["conclusion"]
    assert "reproduces (within 1.5x) for" not in conclusion
    assert "original conditions, ab vs" not in conclusion
    assert "Not measured (the client failed; owed)" in conclusion


def test_a_step_whose_generator_gave_no_result_is_owed(tmp_path: Path) -> None:
    run = RunDir.create(tmp_path, "owed")
    run.write_manifest({"scenario": {"levels": [1], "trials": 1, "mode": "closed"}})
    key = StepKey("m", "closed", 1, None, 1)
    failed = Raised("loadgen_failed", {"message": "locust: error while loading libraries"})
    run.append_step(
        step_record("owed", key, Measured("2026-01-01T00:00:00+00:00"), raised=(failed,))
    )
    assert key not in run.completed()
