"""Faults injected into real runs: each is recorded in its step, and the sweep moves on.

Every test starts `lab run` as a subprocess in its own session (tests/labrun.py), watches the run
directory (pid files, steps.jsonl) to find the moment to strike, then injects the fault with a
real signal: SIGKILL or SIGSTOP of a server, the upstream, the load generator or the lab itself.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from lab.run.steps import Watchdog
from lab.system import procs
from tests.helpers import lab_cli, step_rows, undisturbed
from tests.labrun import LabRun

FIRST, SECOND = "gunicorn-gevent", "gunicorn-gthread"
FAST_SCENARIO = """\
description = "fault tests: tiny levels, short steps"
models = ["gunicorn-gevent"]
levels = [1, 4]
duration_s = 2
warmup_s = 0
settle_s = 0.5
request_timeout_s = 1
start_timeout_s = 3
probe_k = 4
probe_delay_ms = 100
pin_cpus = false
order_seed = 4  # the first trial runs the models in the order listed (the tests strike by order)

[upstream]
delay_ms = 20
"""
BROKEN_MODELS = """\
[models.exits]
description = "exits at once with code 3"
app = "wsgi"
unit = "thread"
argv = ["{bindir}/python", "-c", "import sys; print('boom'); sys.exit(3)", "{port}"]

[models.never-listens]
description = "runs but never opens its port"
app = "wsgi"
unit = "thread"
argv = ["{bindir}/python", "-c", "import time; print('sleeping'); time.sleep(60)", "{port}"]

[models.silent]
description = "accepts connections and never answers"
app = "wsgi"
unit = "thread"
argv = ["{bindir}/python", "-c", "import socket, time; s = socket.create_server(('{host}', {port})); conns = [s.accept() for _ in range(100)]; time.sleep(60)"]
"""  # noqa: E501


@pytest.fixture()
def scenario(tmp_path: Path) -> Callable[..., str]:
    def write(models: list[str], levels: list[int] | None = None) -> str:
        text = FAST_SCENARIO.replace('["gunicorn-gevent"]', json.dumps(models))
        if levels is not None:
            text = text.replace("levels = [1, 4]", f"levels = {json.dumps(levels)}")
        path = tmp_path / "faults.toml"
        path.write_text(text)
        return str(path)

    return write


@pytest.fixture()
def lab_run(tmp_path: Path) -> Iterator[Callable[..., LabRun]]:
    started: list[LabRun] = []

    def start(*args: str) -> LabRun:
        out = tmp_path / f"out{len(started)}"
        out.mkdir()
        run = LabRun(out, *args)
        started.append(run)
        return run

    yield start
    for run in started:
        run.kill()
        for pid, created in run.seen_pids:  # a failed test must not leave load running
            record = procs.PidRecord("left", pid, created, ())
            if record.is_running():
                procs.stop_group(pid, grace_s=1)


def assert_all_gone(run: LabRun) -> None:
    """No process the run started survives, and none of its pid files is left behind."""
    for pid, created in run.seen_pids:
        assert not procs.PidRecord("x", pid, created, ()).is_running(), f"pid {pid} survived"
        assert not procs.group_alive(pid), f"process group {pid} survived"
    assert list((run.dir / "pids").glob("*.pid")) == []


def listening_hosts(pid: int) -> set[str]:
    """The addresses a process tree listens on (every listener the lab starts is loopback)."""
    root = psutil.Process(pid)
    return {
        c.laddr.ip
        for proc in (root, *root.children(recursive=True))
        for c in proc.net_connections("tcp")
        if c.status == psutil.CONN_LISTEN
    }


@pytest.mark.procs  # starts a generator through procs.start (no name tests/tiers.py knows)
def test_watchdog_kills_a_load_generator_that_overruns(tmp_path):
    gen = procs.start(
        "loadgen",
        [sys.executable, "-c", "import time; time.sleep(60)"],
        log_path=tmp_path / "gen.log",
        pid_dir=tmp_path / "pids",
    )
    start = time.monotonic()
    watchdog = Watchdog(gen, limit_s=0.5)
    gen.popen.wait(timeout=10)
    assert watchdog.fired and time.monotonic() - start < 5
    assert gen.popen.returncode in (-signal.SIGTERM, -signal.SIGKILL)
    gen.stop()


def port_is_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@pytest.fixture(scope="module")
def broken_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One run over three models that never become ready, then a real one."""
    tmp = tmp_path_factory.mktemp("broken")
    models_file = tmp / "broken.toml"
    models_file.write_text(BROKEN_MODELS)
    scenario = tmp / "faults.toml"
    models = '["exits", "never-listens", "silent", "gunicorn-gevent"]'
    scenario.write_text(FAST_SCENARIO.replace('["gunicorn-gevent"]', models))
    out = tmp / "out"
    done = subprocess.run(
        lab_cli(
            "run", "--scenario", str(scenario), "--models-file", str(models_file), "--out", str(out)
        ),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (run_dir,) = out.iterdir()
    return run_dir


@pytest.mark.parametrize(
    ("model", "evidence"),
    [
        ("exits", "exited with code 3"),
        ("never-listens", "did not answer"),
        ("silent", "did not answer"),
    ],
    ids=["exits-at-once", "never-listens", "accepts-never-answers"],
)
def test_server_that_never_starts_is_recorded_and_the_sweep_moves_on(broken_run, model, evidence):
    steps = {(s["model"], s["users"]): s for s in step_rows(broken_run)}
    for level in (1, 4):
        step = steps[(model, level)]
        assert step["flags"] == ["start_failed"] and step["requests"] == 0
        assert evidence in step["details"]["start_failed"]["message"]
        assert "log_tail" in step["details"]["start_failed"]
    if model == "exits":
        assert steps[(model, 1)]["details"]["start_failed"]["exit_code"] == 3
        assert "boom" in steps[(model, 1)]["details"]["start_failed"]["log_tail"]
    real = [steps[(FIRST, level)] for level in (1, 4)]
    assert all(s["ok"] > 0 and undisturbed(s) for s in real)  # the next model ran normally
    assert list((broken_run / "pids").glob("*.pid")) == []


def test_server_killed_mid_step(lab_run, scenario):
    run = lab_run("--scenario", scenario([FIRST, SECOND]))
    server = run.wait_measuring(FIRST, step_index=1)
    before = (run.dir / "steps.jsonl").read_bytes()
    os.killpg(server.pid, signal.SIGKILL)
    assert run.finish() == 0, run.output()
    assert (run.dir / "steps.jsonl").read_bytes().startswith(before)  # earlier step unchanged
    steps = run.steps()
    died = steps[1]
    assert (died["model"], died["users"]) == (FIRST, 4)
    assert "server_died" in died["flags"] and "errors" in died["flags"]
    assert set(died["errors"]) <= {"refused", "reset", "timeout", "other"}
    assert sum(died["errors"].values()) > 0  # its connection errors are counted
    assert died["details"]["server_died"]["exit_code"] == -signal.SIGKILL
    assert died["duration_s"] == pytest.approx(2, abs=0.5)
    nxt = [s for s in steps if s["model"] == SECOND]
    assert [s["users"] for s in nxt] == [1, 4] and all(undisturbed(s) for s in nxt)
    assert_all_gone(run)


def test_hung_server_times_out_and_the_step_ends_on_time(lab_run, scenario):
    run = lab_run("--scenario", scenario([FIRST, SECOND]))
    server = run.wait_measuring(FIRST, step_index=1)
    os.killpg(server.pid, signal.SIGSTOP)  # alive, holding its connections, answering nothing
    stopped_at = time.monotonic()
    run.wait_until("the hung step recorded", lambda: len(run.steps()) == 2)
    # the rest of the window (< 2 s), the request timeout (1 s), the /health check (3 s), margin
    assert time.monotonic() - stopped_at < 12
    assert run.finish() == 0, run.output()
    hung = run.steps()[1]
    assert "server_hung" in hung["flags"] and hung["errors"].get("timeout", 0) > 0
    assert hung["duration_s"] == pytest.approx(2, abs=0.5)
    nxt = [s for s in run.steps() if s["model"] == SECOND]
    assert [s["users"] for s in nxt] == [1, 4] and all(undisturbed(s) for s in nxt)
    assert_all_gone(run)


def test_upstream_and_load_generator_deaths_are_recorded_as_theirs(lab_run, scenario):
    """Each death is recorded as the apparatus's, and the two steps are measured again after
    the trial (`lab.run.remeasure`): the first records stay with their evidence, the report
    reads the later ones."""
    run = lab_run("--scenario", scenario([FIRST], levels=[1, 2, 4]), "--remeasure", "5")
    run.wait_measuring(FIRST, step_index=0)
    upstream = run.pid("upstream")
    assert upstream is not None
    os.killpg(upstream.pid, signal.SIGKILL)
    run.wait_measuring(FIRST, step_index=1)
    loadgen = run.pid("loadgen")
    assert loadgen is not None
    os.killpg(loadgen.pid, signal.SIGKILL)
    assert run.finish() == 0, run.output()
    up_down, gen_failed, clean, *again = run.steps()
    # every step the lab or the machine kept from a result is measured again: the two deaths,
    # and any a busy shared machine made `lab_limited` (measured once more if it stays so)
    lab_s = {"upstream_down", "loadgen_failed", "lab_limited"}
    owed = {
        (s["users"], s["trial"]) for s in (up_down, gen_failed, clean) if lab_s & set(s["flags"])
    }
    assert {(1, 1), (2, 1)} <= owed
    assert {(s["users"], s["trial"]) for s in again} == owed, run.output()
    assert all(undisturbed(s) and s["ok"] > 0 for s in again)
    remeasured = json.loads((run.dir / "manifest.json").read_text())["remeasured"]
    assert {f"{FIRST} 1 user trial 1", f"{FIRST} 2 users trial 1"} <= set(remeasured["steps"])
    assert "upstream_down" in up_down["flags"] and "server_died" not in up_down["flags"]
    assert up_down["details"]["upstream_down"]["exit_code"] == -signal.SIGKILL
    assert up_down["errors"].get("http_5xx", 0) > 0  # the app answered 502: the upstream's fault
    assert "loadgen_failed" in gen_failed["flags"] and "server_died" not in gen_failed["flags"]
    assert gen_failed["details"]["loadgen_failed"]["exit_code"] == -signal.SIGKILL
    assert undisturbed(clean) and clean["ok"] > 0  # a restarted upstream, the same server
    assert run.pid("upstream") is None  # stopped at the end like everything else
    assert_all_gone(run)


def test_stalled_upstream_is_recorded_and_replaced(lab_run, scenario):
    run = lab_run("--scenario", scenario([FIRST], levels=[1, 2]), "--remeasure", "0")
    run.wait_measuring(FIRST, step_index=0)
    upstream = run.pid("upstream")
    assert upstream is not None
    os.killpg(upstream.pid, signal.SIGSTOP)  # alive, listening, answering nothing
    assert run.finish() == 0, run.output()
    stalled, clean = run.steps()
    assert "upstream_down" in stalled["flags"] and "server_hung" not in stalled["flags"]
    assert "no answer to /stats" in stalled["details"]["upstream_down"]["problem"]
    assert undisturbed(clean) and clean["ok"] > 0
    assert not upstream.is_running()
    assert_all_gone(run)


def test_lab_killed_then_resumed_keeps_and_skips_every_finished_step(lab_run, scenario):
    path = scenario([FIRST, SECOND])
    run = lab_run("--scenario", path)
    run.wait_measuring(SECOND, step_index=2)
    before = (run.dir / "steps.jsonl").read_bytes()
    children = [run.pid(name) for name in ("upstream", SECOND, "loadgen")]
    run.kill()  # SIGKILL of the lab: nothing of it gets to clean up
    assert any(c is not None and c.is_running() for c in children)  # orphans exist...

    refused = lab_run("--resume", str(run.dir), "--levels", "1,2")
    assert refused.finish() == 2 and "options differ" in refused.output()

    resumed = lab_run("--resume", str(run.dir))
    assert resumed.finish() == 0, resumed.output()
    assert "leftover from a dead run" in resumed.output()
    assert not any(c is not None and c.is_running() for c in children)  # ...and were removed
    after = (run.dir / "steps.jsonl").read_bytes()
    assert after.startswith(before)  # every earlier step intact
    keys = [(s["model"], s["users"]) for s in step_rows(run.dir)]
    assert sorted(keys) == sorted({(m, c) for m in (FIRST, SECOND) for c in (1, 4)})  # none twice
    manifest = json.loads((run.dir / "manifest.json").read_text())
    assert manifest["status"] == "complete" and len(manifest["resumes"]) == 1

    again = lab_run("--resume", str(run.dir))
    assert again.finish() == 0 and "nothing to resume" in again.output()


@pytest.mark.parametrize(
    ("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["ctrl-c", "sigterm"]
)
def test_stop_signal_records_stops_everything_and_exits_non_zero(lab_run, scenario, sig, code):
    """On the lab's own engine, whose per-second samples count requests (oha's records come
    when it ends: its partial step keeps no requests)."""
    run = lab_run("--scenario", scenario([FIRST]), "--engine", "lab")
    server = run.wait_measuring(FIRST, step_index=1)
    upstream = run.pid("upstream")
    assert upstream is not None
    assert listening_hosts(server.pid) | listening_hosts(upstream.pid) == {"127.0.0.1"}
    time.sleep(1.2)  # at least one per-second tick measured: something to keep
    os.kill(run.popen.pid, sig)
    assert run.finish(timeout_s=30) == code, run.output()
    manifest = run.manifest()
    assert manifest["status"] == "interrupted" and manifest["interrupted_by"] == sig.name
    nofile = manifest["environment"]["nofile_applied"]
    assert nofile["soft"] >= nofile["needed"] and nofile["hard"] >= nofile["soft"]
    first, partial = run.steps()
    assert undisturbed(first) and "interrupted" in partial["flags"]
    assert partial["ok"] > 0 and partial["histogram"] == ""
    assert_all_gone(run)
    upstream_port = int(manifest["upstream_argv"][manifest["upstream_argv"].index("--port") + 1])
    assert port_is_free(upstream_port)
    mentions_run = [
        p.pid for p in psutil.process_iter(["cmdline"]) if str(run.dir) in str(p.info["cmdline"])
    ]
    assert mentions_run == []
