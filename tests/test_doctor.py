"""`lab doctor`: limits vs tuning/, what they allow, and leftovers of dead runs (never others)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lab.run import leftovers
from lab.system import procs, tuning
from tests.helpers import lab_cli

SETTINGS = {
    "net.core.somaxconn",
    "net.ipv4.tcp_max_syn_backlog",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.tcp_tw_reuse",
    "nofile (soft/hard)",
}


def run_doctor(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(lab_cli("doctor", *args), capture_output=True, text=True, timeout=60)


def test_doctor_compares_every_setting_with_the_tuning_files(tmp_path):
    done = run_doctor("--json", "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    checks = {c["name"]: c for c in report["checks"]}
    assert set(checks) == SETTINGS
    assert (
        checks["net.core.somaxconn"]["recommended"] == tuning.read_sysctls()["net.core.somaxconn"]
    )
    for check in checks.values():
        assert bool(check["command"]) == (not check["ok"] or "ulimit" in check["command"])
        if check["command"] and check["name"].startswith("net."):
            assert check["command"].startswith(f"sudo sysctl -w {check['name']}=")
    allowed = report["capacity"]
    assert allowed["client_max_connections"] > 0 and allowed["server_max_connections"] > 0
    assert allowed["lab_max_level"] <= allowed["server_max_connections"]


def test_doctor_prints_a_table_and_permanent_commands(tmp_path):
    done = run_doctor("--out", str(tmp_path))
    assert done.returncode == 0, done.stderr
    for needle in (
        "somaxconn",
        "recommended",
        "concurrent client",
        "sysctl --system",
        "limits.d",
        "--ulimit nofile=",
    ):
        assert needle in done.stdout


def test_tuning_files_parse():
    assert set(tuning.read_sysctls()) == SETTINGS - {"nofile (soft/hard)"}
    nofile = tuning.read_nofile()
    assert nofile["soft"] > 1024 and nofile["hard"] >= nofile["soft"]


def sleeper() -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True
    )


@pytest.fixture()
def dead_run(tmp_path: Path):
    """A run directory as a SIGKILLed lab leaves it: owner gone, a child still running."""
    run_dir = tmp_path / "results" / "20260101-000000-quick"
    pids = run_dir / "pids"
    owner = subprocess.Popen([sys.executable, "-c", "pass"])
    owner.wait()  # a lab process that has died
    procs.PidRecord.of("lab", owner.pid, ["lab", "run"]).write(pids / procs.OWNER_PID_FILE)
    (run_dir / "manifest.json").write_text(json.dumps({"status": "running"}))
    child = sleeper()
    time.sleep(0.1)
    procs.PidRecord.of("gunicorn-gevent", child.pid, ["gunicorn"]).write(
        pids / "gunicorn-gevent.pid"
    )
    yield run_dir, child
    if child.poll() is None:
        child.kill()
    child.wait()


def test_leftovers_of_a_dead_run_are_found_and_stopped(dead_run):
    run_dir, child = dead_run
    found = leftovers.find(run_dir.parent)
    assert {(f.record.name, f.alive) for f in found} == {("gunicorn-gevent", True), ("lab", False)}
    done = run_doctor("--out", str(run_dir.parent), "--clean")
    assert done.returncode == 0 and "leftovers of dead runs cleaned" in done.stdout
    assert child.wait(timeout=10) is not None
    assert list((run_dir / "pids").glob("*.pid")) == []
    assert json.loads((run_dir / "manifest.json").read_text())["status"] == "interrupted"


def test_a_reused_pid_is_never_killed(dead_run):
    """A pid file whose pid now belongs to another process (other start time) is only removed."""
    run_dir, child = dead_run
    record = procs.PidRecord.read(run_dir / "pids" / "gunicorn-gevent.pid")
    assert record is not None
    forged = procs.PidRecord(record.name, record.pid, record.create_time - 1000, record.argv)
    forged.write(run_dir / "pids" / "gunicorn-gevent.pid")
    (found,) = [f for f in leftovers.find(run_dir.parent) if f.record.name != "lab"]
    assert not found.alive
    leftovers.clean([found])
    time.sleep(0.2)
    assert child.poll() is None  # the unrelated process still runs


def test_a_live_lab_keeps_its_children(dead_run):
    """Another lab still running its run: nothing in that directory is a leftover."""
    run_dir, _ = dead_run
    procs.PidRecord.of("lab", os.getpid(), ["lab"]).write(run_dir / "pids" / procs.OWNER_PID_FILE)
    assert leftovers.find(run_dir.parent) == []
