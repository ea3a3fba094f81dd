"""Hostile input that needs real processes: an executable the kernel refuses, a tiny sweep on
::1, a background lab that must still stop on SIGINT, a server that never gets ready, an
interrupted run. Each ends in a clean message, a documented exit code and a recorded step.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from lab.system import procs
from tests.helpers import lab_cli, step_rows
from tests.hostile_input import TINY, models_doc

pytestmark = pytest.mark.procs  # every test starts processes


def test_start_that_the_kernel_refuses_is_start_failed_with_the_reason(tmp_path):
    """Past every check (the file changed after it): a StartFailed a sweep records, not a crash."""
    program = tmp_path / "server"
    program.write_bytes(b"no shebang\n")
    program.chmod(0o755)
    with pytest.raises(procs.StartFailed, match="Exec format error") as caught:
        procs.start("mine", [str(program)], log_path=tmp_path / "log")
    assert caught.value.evidence["error"]


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
    steps = step_rows(run)
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
    steps = step_rows(run)
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
