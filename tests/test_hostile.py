"""The hostile-input corpus: every case ends in a clean one-line message and a documented exit code.

Each case runs the real `lab` CLI in-process through click's CliRunner (no process starts: the
sweep is replaced by a stub that records the plan it was given, so an accepted input costs
nothing), except the few that need a real process (an executable the kernel refuses, a tiny sweep
on ::1, pid files naming a live unrelated process). Every case also checks that an existing result
directory handed to the command is left byte for byte as it was.

Data files under tests/hostile/ carry their expectation on their first line:
`# expect: CODE NEEDLE` or `# expect: accepted`. Cases that need the run-directory owner
(issue 10) run against `lab.record.rundir`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lab.cli import main as cli
from lab.cli import run as run_command
from lab.config.models import load_registry
from lab.config.scenario import SCENARIO_TYPES, UPSTREAM_TYPES, load_scenario
from lab.record.errors import EXIT_REFUSED, EXIT_USAGE, LabError
from lab.system import procs
from tests.conftest import lab_cli
from tests.fixture_run import FixtureStep, build_run
from tests.test_validation import models_doc, toml_doc

HOSTILE = Path(__file__).resolve().parent / "hostile"
TINY = str(HOSTILE / "tiny.toml")  # a two-level, one-second real sweep
ACCEPTED = "accepted"


@dataclass(frozen=True)
class Outcome:
    code: int | str  # an exit code, or "accepted" when the (stubbed) sweep was reached
    err: str


class Accepted(Exception):
    """The input was valid: the stubbed sweep was reached (nothing starts)."""


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

    class StubSweep:
        def __init__(self, plan: Any, *_: object, **__: object) -> None:
            raise Accepted

    monkeypatch.setattr(run_command, "Sweep", StubSweep)

    def invoke(*args: str) -> Outcome:
        runner = CliRunner()
        with runner.isolation() as streams:
            try:
                cli.entry(list(args))
                code: int | str = 0
            except Accepted:
                code = ACCEPTED
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else 1
            err = streams[1].getvalue().decode(errors="replace")
        return Outcome(code, err)

    return invoke


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
    ("rate-1e308", ["--mode", "open", "--rates", "1e308"], EXIT_USAGE, "and 1000000"),
    ("level-40-digits", ["--levels", "9" * 40], EXIT_USAGE, "between 1 and 1000000"),
    ("duration-1e9", ["--duration", "1e9"], EXIT_USAGE, "between 0 and 86400"),
    ("trials-1000", ["--trials", "1000"], EXIT_USAGE, "between 0 and 100"),
    ("delay-1e12", ["--delay-ms", "1e12"], EXIT_USAGE, "between 0 and 600000"),
    ("warmup-1e9", ["--warmup", "1e9"], EXIT_USAGE, "between 0 and 3600"),
    ("start-timeout-1e9", ["--start-timeout", "1e9"], EXIT_USAGE, "between 0 and 600"),
    ("request-timeout-1e9", ["--request-timeout", "1e9"], EXIT_USAGE, "between 0 and 3600"),
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
        ["--models", "uwsgi-gevent", "--knob", "workers=1"],
        ACCEPTED,
        "workers=1 raised to 2",
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


def test_start_that_the_kernel_refuses_is_start_failed_with_the_reason(tmp_path):
    """Past every check (the file changed after it): a StartFailed a sweep records, not a crash."""
    program = tmp_path / "server"
    program.write_bytes(b"no shebang\n")
    program.chmod(0o755)
    with pytest.raises(procs.StartFailed, match="Exec format error") as caught:
        procs.start("mine", [str(program)], log_path=tmp_path / "log")
    assert caught.value.evidence["error"]


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


# --- property-based: random TOML documents for the two schemas ----------------------------------

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


# --- IPv6 loopback, end to end ------------------------------------------------------------------


def test_tiny_real_sweep_on_ipv6_loopback(tmp_path):
    done = subprocess.run(
        lab_cli("run", "--scenario", TINY, "--host", "::1", "--out", str(tmp_path)),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    (run,) = tmp_path.iterdir()
    steps = [json.loads(line) for line in (run / "steps.jsonl").read_text().splitlines()]
    assert [s["users"] for s in steps] == [1, 2]
    assert all(s["ok"] > 0 and not s["errors"] for s in steps), steps
    manifest = json.loads((run / "manifest.json").read_text())
    assert (
        "[HOST]:0" not in json.dumps(manifest)
        and "--bind" in manifest["models"]["gunicorn-gevent"]["argv"]
    )
    assert "[::1]:" in json.dumps(manifest["upstream_argv"]) or "::1" in manifest["upstream_argv"]


def test_background_lab_still_stops_on_sigint(tmp_path):
    """`lab run &` from a script starts with SIGINT ignored; `kill -INT` must still stop it."""
    script = f"{' '.join(map(repr, lab_cli('run', '--models', 'gunicorn-gevent', '--levels', '1', '--duration', '30', '--warmup', '0', '--out', str(tmp_path))))} & wait"  # noqa: E501
    shell = subprocess.Popen(
        ["sh", "-c", script], stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    lab_pid = wait_for_owner(tmp_path)
    os.kill(lab_pid, signal.SIGINT)
    _, err = shell.communicate(timeout=60)
    assert "interrupted" in err and "Traceback" not in err, err


def wait_for_owner(out: Path, timeout_s: float = 60) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for owner in out.glob(f"*/pids/{procs.OWNER_PID_FILE}"):
            record = procs.PidRecord.read(owner)
            if record is not None:
                time.sleep(1)  # the sweep is under way: its signal handlers are installed
                return record.pid
        time.sleep(0.1)
    raise AssertionError("the lab never started")


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


def test_start_timeout_records_start_failed_for_every_level_and_goes_on(tmp_path):
    table = {
        "description": "never ready",
        "app": "wsgi",
        "unit": "thread",
        "argv": ["{bindir}/python", "-c", "import time; time.sleep(60)"],
    }
    models = tmp_path / "models.toml"
    models.write_text(models_doc({"silent": table}))
    done = subprocess.run(
        lab_cli(
            "run",
            "--scenario",
            TINY,
            "--models-file",
            str(models),
            "--models",
            "silent,gunicorn-gevent",
            "--start-timeout",
            "2",
            "--out",
            str(tmp_path / "out"),
        ),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    (run,) = (tmp_path / "out").iterdir()
    steps = [json.loads(line) for line in (run / "steps.jsonl").read_text().splitlines()]
    silent = [s for s in steps if s["model"] == "silent"]
    assert sorted(s["users"] for s in silent) == [1, 2]
    assert all("start_failed" in s["flags"] for s in silent)
    assert sum(s["model"] == "gunicorn-gevent" and s["ok"] > 0 for s in steps) == 2


def test_interrupted_reason_is_never_empty_and_cleared_by_a_resume(tmp_path):
    argv = lab_cli("run", "--scenario", TINY, "--duration", "3", "--out", str(tmp_path))
    lab_run = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True)
    os.kill(wait_for_owner(tmp_path), signal.SIGINT)
    _, err = lab_run.communicate(timeout=60)
    assert "interrupted ()" not in err, err
    (run,) = tmp_path.iterdir()
    assert json.loads((run / "manifest.json").read_text())["interrupted_by"]
    resumed = subprocess.run(
        lab_cli("run", "--resume", str(run)), capture_output=True, text=True, timeout=120
    )
    assert resumed.returncode == 0, resumed.stderr
    assert "interrupted_by" not in json.loads((run / "manifest.json").read_text())
