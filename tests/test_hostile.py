"""The hostile-input corpus: every case ends in a clean one-line message and a documented exit code.

Each case runs the real `lab` CLI in-process through click's CliRunner (no process starts: the
sweep is replaced by a stub, so an accepted input costs nothing; tests/hostile_input.py), except
pid files naming a live unrelated process. Every case also checks that an existing result
directory handed to the command is left byte for byte as it was. The cases that need a real
process are in tests/test_hostile_processes.py, random TOML documents in
tests/test_hostile_toml.py.

Data files under tests/hostile/ carry their expectation on their first line:
`# expect: CODE NEEDLE` or `# expect: accepted`. Cases that need the run-directory owner
(issue 10) run against `lab.record.rundir`.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from lab.record.errors import EXIT_REFUSED, EXIT_USAGE
from tests.fixture_run import FixtureStep, build_run
from tests.hostile_input import ACCEPTED, HOSTILE, Outcome, models_doc, stubbed_lab


def snapshot(root: Path) -> dict[str, tuple[bytes, float]]:
    """Every file under root with its bytes and mtime: what "unchanged" means."""
    return {
        str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mtime)
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.fixture()
def out(tmp_path: Path) -> Iterator[Path]:
    """A results directory holding one finished run; asserted unchanged after the test."""
    results = tmp_path / "results"
    run = build_run(results / "20240101-000000-fixture", [FixtureStep("m1", 1)])
    before = snapshot(run)
    yield results
    assert snapshot(run) == before, "an existing result directory was changed"


@pytest.fixture()
def lab(monkeypatch: pytest.MonkeyPatch) -> Callable[..., Outcome]:
    """Run `lab ARGS` in-process under CliRunner; the sweep is a stub that raises Accepted."""
    return stubbed_lab(monkeypatch)


def assert_clean(outcome: Outcome, code: int | str, needle: str = "") -> None:
    """The documented code, no traceback, and for an error one line naming the problem."""
    assert outcome.code == code, outcome.err
    assert "Traceback" not in outcome.err, outcome.err
    if code not in (0, ACCEPTED):
        lines = [line for line in outcome.err.splitlines() if line.strip()]
        assert len(lines) == 1 or lines[-1].startswith(("Error:", "error:")), outcome.err
    assert needle in outcome.err, outcome.err


def expectation(path: Path) -> tuple[int | str, str]:
    first = path.read_text().splitlines()[0]
    assert first.startswith("# expect: "), path
    word, _, needle = first.removeprefix("# expect: ").partition(" ")
    return (ACCEPTED, "") if word == ACCEPTED else (int(word), needle)


def data_files(folder: str) -> list[Path]:
    return sorted((HOSTILE / folder).iterdir())


# --- command-line arguments ------------------------------------------------------------------

CLI_CASES = [
    ("empty-out", ["--out", ""], EXIT_USAGE, "empty string"),
    ("out-is-a-file", ["--out", "/etc/hostname"], EXIT_USAGE, "not a directory"),
    ("out-under-a-file", ["--out", "/etc/hostname/results"], EXIT_REFUSED, "cannot write"),
    ("out-in-proc", ["--out", "/proc/lab-results"], EXIT_REFUSED, "cannot write"),
    ("duplicate-levels", ["--levels", "1,10,1"], EXIT_USAGE, "listed more than once: 1"),
    ("duplicate-models", ["--models", "uwsgi-threads,uwsgi-threads"], EXIT_USAGE, "more than once"),
    ("duplicate-rates", ["--mode", "open", "--rates", "5,5"], EXIT_USAGE, "more than once: 5"),
    ("rate-1e308", ["--mode", "open", "--rates", "1e308"], EXIT_USAGE, "at most 1000000"),
    ("level-40-digits", ["--levels", "9" * 40], EXIT_USAGE, "between 1 and 1000000"),
    ("duration-1e9", ["--duration", "1e9"], EXIT_USAGE, "above 0 and at most 86400"),
    ("trials-1000", ["--trials", "1000"], EXIT_USAGE, "above 0 and at most 100"),
    ("delay-1e12", ["--delay-ms", "1e12"], EXIT_USAGE, "between 0 and 600000"),
    ("warmup-1e9", ["--warmup", "1e9"], EXIT_USAGE, "between 0 and 3600"),
    ("start-timeout-1e9", ["--start-timeout", "1e9"], EXIT_USAGE, "above 0 and at most 600"),
    ("request-timeout-1e9", ["--request-timeout", "1e9"], EXIT_USAGE, "above 0 and at most 3600"),
    (
        "outstanding-1e9",
        ["--mode", "open", "--rates", "5", "--max-outstanding", "1000000000"],
        EXIT_USAGE,
        "between 1 and 1000000",
    ),
    ("knob-1e9", ["--knob", "backlog=1000000000"], EXIT_USAGE, "between 1 and 1000000"),
    ("markup-scenario-name", ["--scenario", "no[/such]"], EXIT_USAGE, "'no[/such]'"),
    ("markup-model-name", ["--models", "[bold]x[/bold]"], EXIT_USAGE, "[bold]x[/bold]"),
    ("markup-close-tag", ["--scenario", "x[/x].toml"], EXIT_USAGE, "x[/x].toml"),
    ("ipv6-wildcard", ["--host", "::"], EXIT_USAGE, "not a loopback"),
    ("ipv6-loopback", ["--host", "::1"], ACCEPTED, ""),
    ("ipv6-bracketed", ["--host", "[::1]"], ACCEPTED, ""),
    ("gevent-level-1", ["--models", "uwsgi-gevent", "--levels", "1"], ACCEPTED, "raised to 2"),
    (
        "gevent-knob-1",
        ["--models", "uwsgi-gevent", "--knob", "concurrency=1"],
        ACCEPTED,
        "concurrency=1 raised to 2",
    ),
    ("unknown-option", ["--bogus"], EXIT_USAGE, "No such option"),
]


@pytest.mark.parametrize(
    ("args", "code", "needle"), [c[1:] for c in CLI_CASES], ids=[c[0] for c in CLI_CASES]
)
def test_hostile_run_arguments(lab, out, args, code, needle):
    assert_clean(lab("run", "--out", str(out), *args), code, needle)


@pytest.mark.parametrize("value", ["", " "], ids=["empty", "blank"])
def test_doctor_refuses_an_empty_out(lab, value):
    assert_clean(lab("doctor", "--out", value), EXIT_USAGE, "empty string")


# --- scenario and models files -----------------------------------------------------------------


@pytest.mark.parametrize("path", data_files("scenarios"), ids=lambda p: p.stem)
def test_hostile_scenario_file(lab, out, path):
    code, needle = expectation(path)
    assert_clean(lab("run", "--out", str(out), "--scenario", str(path)), code, needle)


@pytest.mark.parametrize("path", data_files("models"), ids=lambda p: p.stem)
def test_hostile_models_file(lab, out, path):
    code, needle = expectation(path)
    args = ("--models-file", str(path), "--models", "mine", "--levels", "8")
    assert_clean(lab("run", "--out", str(out), *args), code, needle)


def write_model(tmp_path: Path, program: Path, env: dict[str, str] | None = None) -> Path:
    table = {
        "description": "d",
        "app": "wsgi",
        "unit": "thread",
        "argv": [str(program), "{bind}"],
        "env": env or {},
    }
    path = tmp_path / "models.toml"
    path.write_text(models_doc({"mine": table}))
    return path


@pytest.mark.parametrize(
    ("content", "mode", "needle"),
    [
        (b"echo no shebang\n", 0o755, "ENOEXEC"),
        (b"\x00\x01binary", 0o755, "ENOEXEC"),
        (b"#!/bin/sh\n", 0o644, "not found"),
    ],
    ids=["script-without-shebang", "not-a-binary", "not-executable"],
)
def test_executable_the_kernel_would_refuse(lab, out, tmp_path, content, mode, needle):
    program = tmp_path / "server"
    program.write_bytes(content)
    program.chmod(mode)
    args = ("--models-file", str(write_model(tmp_path, program)), "--models", "mine")
    assert_clean(lab("run", "--out", str(out), *args), EXIT_USAGE, needle)


@pytest.mark.parametrize(
    ("argv", "env"),
    [(["x" * 200_000], {}), (["a"] * 60_000, {}), (["a"], {"BIG": "y" * 200_000})],
    ids=["one-huge-argument", "many-arguments", "huge-env"],
)
def test_argument_list_too_long(lab, out, tmp_path, argv, env):
    table = {"description": "d", "app": "wsgi", "unit": "thread", "argv": argv, "env": env}
    path = tmp_path / "models.toml"
    path.write_text(models_doc({"mine": table}))
    assert_clean(lab("run", "--out", str(out), "--models-file", str(path)), EXIT_USAGE, "E2BIG")


# --- pid files -----------------------------------------------------------------------------------


def plant_pid_file(out: Path, name: str, content: bytes) -> Path:
    pid_dir = out / "20240202-000000-dead" / "pids"
    pid_dir.mkdir(parents=True, exist_ok=True)
    (pid_dir.parent / "manifest.json").write_text('{"status": "running"}')
    path = pid_dir / name
    path.write_bytes(content)
    return path


@pytest.fixture()
def bystander() -> Iterator[subprocess.Popen[bytes]]:
    """An unrelated live process whose pid a hostile pid file names: it must survive."""
    proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
    yield proc
    proc.kill()
    proc.wait()


PID_COMMANDS = [["doctor"], ["doctor", "--clean"], ["run"]]


@pytest.mark.parametrize("command", PID_COMMANDS, ids=lambda c: "-".join(c))
@pytest.mark.parametrize("path", data_files("pids"), ids=lambda p: p.stem)
def test_hostile_pid_file(lab, out, bystander, path, command):
    plant_pid_file(out, "server.pid", path.read_bytes())
    victim = out / "victim.pid"
    victim.write_text("not ours")
    outcome = lab(
        *command, "--out", str(out), *(["--models", "nosuch"] if command == ["run"] else [])
    )
    assert_clean(outcome, EXIT_USAGE if command == ["run"] else 0)
    assert bystander.poll() is None and victim.exists()


@pytest.mark.parametrize(
    "record",
    [{"create_time": 0.0}, {"create_time": 1.0}, {"create_time": None}, {"pid_file": "lab.pid"}],
    ids=["start-time-zero", "start-time-wrong", "start-time-missing", "as-the-lab-owner"],
)
def test_pid_file_naming_an_unrelated_live_process(lab, out, bystander, record):
    data = {"name": "gunicorn-gevent", "pid": bystander.pid, "create_time": 0.0, "argv": ["x"]}
    data.update({k: v for k, v in record.items() if k != "pid_file"})
    plant_pid_file(out, record.get("pid_file", "server.pid"), json.dumps(data).encode())
    for command in PID_COMMANDS:
        assert_clean(
            lab(*command, "--out", str(out), *(["--models", "x"] if command == ["run"] else [])),
            EXIT_USAGE if command == ["run"] else 0,
        )
    assert bystander.poll() is None, "an unrelated process was signalled"


# --- damaged result directories: the run-directory owner's cases (issue 10) --------------------


def fixture_run(out: Path, **manifest: Any) -> Path:
    run = build_run(out / "20240303-000000-damaged", [FixtureStep("m1", 1), FixtureStep("m1", 2)])
    if manifest:
        data = json.loads((run / "manifest.json").read_text())
        data.update(manifest)
        (run / "manifest.json").write_text(json.dumps(data))
    return run


def test_truncated_last_step_is_repaired_on_resume(lab, tmp_path):
    run = fixture_run(tmp_path, status="interrupted", invocation={})
    steps = run / "steps.jsonl"
    complete = steps.read_text().splitlines()
    steps.write_text("\n".join(complete) + "\n" + complete[-1][: len(complete[-1]) // 2])
    outcome = lab("run", "--resume", str(run))
    assert outcome.code in (0, ACCEPTED) and "truncated" in outcome.err, outcome.err
    assert [json.loads(line) for line in steps.read_text().splitlines()] == [
        json.loads(line) for line in complete
    ]
    assert list(run.glob("steps.jsonl.*")), "the fragment was not kept aside"


DAMAGED = [
    ("manifest-empty-object", "manifest.json", "{}"),
    ("manifest-list", "manifest.json", "[1, 2]"),
    ("manifest-string", "manifest.json", '"run"'),
    ("manifest-wrong-types", "manifest.json", '{"status": 5, "invocation": [], "scenario": 3}'),
    ("steps-list-lines", "steps.jsonl", "[1]\n[2]\n"),
    ("steps-wrong-types", "steps.jsonl", '{"model": 5, "concurrency": "x", "trial": null}\n'),
    ("preflight-garbage", "preflight.jsonl", "\x00\x01\n"),
]


@pytest.mark.parametrize(("name", "content"), [d[1:] for d in DAMAGED], ids=[d[0] for d in DAMAGED])
@pytest.mark.parametrize("command", ["resume", "report", "compare"])
def test_damaged_run_directory_is_refused_by_name(lab, tmp_path, command, name, content):
    run = fixture_run(tmp_path)
    (run / name).write_text(content)
    before = snapshot(run)
    args = {
        "resume": ["run", "--resume", str(run)],
        "report": ["report", str(run)],
        "compare": ["compare", str(run), str(run)],
    }[command]
    assert_clean(lab(*args), EXIT_USAGE, name)
    assert snapshot(run) == before


@pytest.mark.parametrize("command", ["report", "compare"])
def test_a_directory_that_is_not_a_run_is_refused(lab, tmp_path, command):
    args = [str(tmp_path)] * (2 if command == "compare" else 1)
    assert_clean(lab(command, *args), EXIT_USAGE, "not a run directory")


def test_report_of_a_run_with_no_successful_step(lab, tmp_path):
    zero = {
        "rps_per_second": (0.0, 0.0),
        "errors": {"refused": 9},
        "write_hlog": False,
        "flags": ("errors", "no_responses"),
    }
    run = build_run(tmp_path / "r", [FixtureStep("m1", 1, **zero), FixtureStep("m1", 2, **zero)])
    outcome = lab("report", str(run))
    assert_clean(outcome, 0)
    assert (run / "report.html").exists()
