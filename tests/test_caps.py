"""Why a model stops scaling, for any app: a cap seen from outside the server (Little's law and
the probe), a contended apparatus core, and damage in a finished run, never passed in silence.

Pure rules on hand-built records first, then real servers loading a user's own app whose code
holds a small pool around its slow call (the classic: a database pool of a few connections).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from analysis.judge import judge, sentence
from analysis.points import build
from lab.record.step import Measured, Sampled, StepKey, StepRecord, step_record
from lab.record.thresholds import T
from lab.run.apparatus import saturated
from lab.run.preflight import measured_cap
from lab.system.sampling import HostMeter
from lab.verdict.assess import assessed
from lab.verdict.capacity import Capacity
from tests.fixture_run import window
from tests.helpers import lab_cli, lab_run, step_rows
from tests.undisturbed import undisturbed

D_MS = 100.0
POOL = 4
USER_APP = """
import threading
import time

from flask import Flask

app = Flask(__name__)
pool = threading.BoundedSemaphore({pool}) if {pool} else None


@app.get("/health")
def health() -> str:
    return "ok"


@app.get("/work")
def work() -> str:
    if pool is None:
        time.sleep(0.1)
    else:
        with pool:  # a stand-in for a pool of a few database connections
            time.sleep(0.1)
    return "done"
"""


def capacity(requests: int = 50, processes: int = 1, probe: float | None = None) -> Capacity:
    knob = f"{requests // processes} threads x {processes} process"
    return Capacity(requests, knob, 1.0, D_MS, 24_000, 40, processes, probe)


def user_step(users: int, rps: float, p50: float, cpu: float = 2.0, **cap: int) -> StepRecord:
    """A closed-loop step of a user's app: the upstream's in-flight count is unknown (-1)."""
    measured = window(rps, p50, client_cpu_pct=5.0)
    sampled = Sampled(server_cpu_pct=cpu, server_rss_mb=60, upstream_max_inflight=-1)
    key = StepKey("m", "closed", users, None, 1)
    return assessed(step_record("run", key, measured, sampled), capacity(**cap))


@pytest.mark.parametrize(
    ("record", "flag", "words"),
    [
        (user_step(50, 40, 1220), "capped_unexplained", "about 4 requests run at once per process"),
        (user_step(50, 80, 1220, requests=8, processes=2), "capped", "explain it"),
        (user_step(20, 190, 104), None, "throughput 95% of the ideal"),
        # a core 80% busy with requests queueing for it: server CPU, not "cause not found"
        (user_step(50, 300, 160, cpu=80), None, "server CPU 80% of 1 core"),
        (user_step(50, 300, 120), None, "cause not found"),
    ],
    ids=["pool-of-4", "knobs-8-of-2-processes", "no-cap", "busy-server", "below-ideal-short-wait"],
)
def test_a_cap_is_inferred_from_outside(record: StepRecord, flag: str | None, words: str) -> None:
    caps = {"capped", "capped_unexplained"} & set(record.evidence.flags)
    assert caps == ({flag} if flag else set())
    assert words in record.evidence.limit_reason
    assert record.evidence.limited_by == ("concurrency_cap" if flag else record.evidence.limited_by)
    assert record.load.inferred_inflight == pytest.approx(
        record.load.throughput_rps * D_MS / 1000, 0.01
    )
    assert "no limit reached" not in record.evidence.limit_reason


def test_the_probes_cap_joins_the_evidence_and_the_words() -> None:
    measured = Measured("2026-01-01T00:00:00+00:00", 10.0, 400, 400, latency_ms={"p50": 1200})
    key = StepKey("m", "closed", 50, None, 1)
    record = assessed(step_record("run", key, measured), capacity(probe=4))
    assert "the probe found the same, about 4 at once" in record.evidence.limit_reason
    assert "about 4" in record.evidence.details["capped_unexplained"]["probe"]


WAVES = {  # served times (s) of a probe whose route takes d = 0.1 s alone
    "half": [0.1] * 4 + [0.2] * 4,
    "full": [0.1] * 8,
    "serialized": [0.1 * (i + 1) for i in range(8)],
    "six-then-two": [0.1] * 6 + [0.2] * 2,
    "small-k-full": [0.1] * 4,
    "stretched-one-wave": [0.062, 0.059, 0.068, 0.066, 0.066, 0.082, 0.081, 0.081],
    "fifteen-of-32": [0.1] * 15 + [0.2] * 15 + [0.3] * 2,
}


@pytest.mark.parametrize(
    ("waves", "d", "cap"),
    [
        ("half", 0.1, 4),
        ("full", 0.1, None),
        ("serialized", 0.1, None),
        ("six-then-two", 0.1, 6),
        ("small-k-full", 0.1, None),
        ("stretched-one-wave", 0.0533, None),  # measured: a 50 ms route in PostgreSQL, 8 at once
        ("fifteen-of-32", 0.1, 15),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_a_partial_overlap_is_a_measured_cap(waves: str, d: float, cap: int | None) -> None:
    served = WAVES[waves]
    overlap = round(len(served) * d / max(served), 2)
    assert measured_cap(overlap, len(served), served, d) == cap


@pytest.mark.parametrize(
    ("busy", "waited", "flagged"),
    [
        (87.0, 42.0, True),
        (60.0, T.apparatus_queued_pct, True),
        (45.0, 2.0, False),
        (87.0, 8, False),
    ],
    ids=["contended-87-42", "at-the-threshold", "idle", "busy-not-waiting"],
)
def test_waiting_for_a_cpu_saturates_the_apparatus_whatever_the_mean_busy(
    busy: float, waited: float, flagged: bool
) -> None:
    sampled = Sampled(apparatus_core_pct=busy, apparatus_wait_pct=waited, upstream_lag_ms=0.2)
    raised = saturated(Measured("", client_cpu_pct=20.0), sampled, D_MS)
    assert bool(raised) == flagged
    if flagged:
        assert raised[0].evidence["waited_for_cpu_pct"] == waited


def test_a_contended_core_is_measured_as_waiting(tmp_path: Path) -> None:
    """Two busy loops pinned to one core: the one measured waits for the CPU about half the
    time, far past the threshold; alone on its core it would wait close to nothing."""
    core = sorted(os.sched_getaffinity(0))[-1]
    spin = f"import os, time; os.sched_setaffinity(0, {{{core}}}); t = time.time() + 6\n"
    spin += "while time.time() < t: pass"
    spinners = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(2)]
    try:
        time.sleep(0.5)
        meter = HostMeter((core,), (spinners[0].pid,))
        meter.clear()
        for _ in range(3):
            time.sleep(0.5)
            meter.sample()
        waited = sum(meter.waited) / len(meter.waited)
    finally:
        for p in spinners:
            p.kill()
            p.wait()
    assert waited >= T.apparatus_queued_pct, meter.waited
    sampled = Sampled(apparatus_core_pct=100.0, apparatus_wait_pct=waited)
    assert saturated(Measured("", client_cpu_pct=50.0), sampled, D_MS)


@pytest.fixture()
def user_app(tmp_path: Path) -> Path:
    """The app with a pool of POOL around its slow call (`pooled_app`) and without (`free_app`)."""
    (tmp_path / "pooled_app.py").write_text(USER_APP.format(pool=POOL))
    (tmp_path / "free_app.py").write_text(USER_APP.format(pool=0))
    return tmp_path


def sweep_app(app_dir: Path, out: Path, target: str, *args: str) -> tuple[list[dict], Path, str]:
    run, done = lab_run(
        out,
        *("--app", f"{target}:app", "--app-dir", str(app_dir), "--path", "/health"),
        *("--path", "/work", "--levels", "1,20", "--duration", "2", "--warmup", "0", *args),
        timeout_s=300,
    )
    steps = step_rows(run)
    return sorted(steps, key=lambda s: (s["model"], s["users"])), run, done.stdout + done.stderr


@pytest.mark.parametrize("model", ["uwsgi-threads", "gunicorn-gevent"])
def test_a_pool_in_the_users_app_is_capped_unexplained_where_it_queues(
    user_app: Path, tmp_path: Path, model: str
) -> None:
    steps, run, said = undisturbed(
        lambda attempt: sweep_app(
            user_app, tmp_path / f"out{attempt}", "pooled_app", "--models", model
        ),
        lambda found: found[0][1],
    )
    one, twenty = steps
    assert not {"capped", "capped_unexplained"} & set(one["flags"])
    assert "capped_unexplained" in twenty["flags"] and twenty["limited_by"] == "concurrency_cap"
    assert 3 <= twenty["inferred_inflight"] <= 5, twenty["inferred_inflight"]
    assert "about 4 requests run at once per process" in twenty["limit_reason"]
    assert "about 4" in twenty["details"]["capped_unexplained"]["probe"]
    assert "a cap of about 4 at once" in said and "no limit reached" not in said
    (check,) = [json.loads(line) for line in (run / "preflight.jsonl").read_text().splitlines()]
    assert [p["cap"] for p in check["probes"]] == [4]


def test_a_knob_cap_in_the_users_app_is_capped(user_app: Path, tmp_path: Path) -> None:
    args = ("--models", "uwsgi-threads", "--knob", "concurrency=4")
    _, twenty = undisturbed(
        lambda attempt: sweep_app(user_app, tmp_path / f"out{attempt}", "free_app", *args),
        lambda found: found[0][1],
    )[0]
    assert "capped" in twenty["flags"] and "capped_unexplained" not in twenty["flags"]
    assert "the knobs' 4 threads x 1 process explain it" in twenty["limit_reason"]


def test_an_app_without_a_cap_is_not_flagged(user_app: Path, tmp_path: Path) -> None:
    steps, _, said = sweep_app(user_app, tmp_path / "out", "free_app", "--models", "uwsgi-threads")
    for step in steps:
        assert not {"capped", "capped_unexplained"} & set(step["flags"]), step["limit_reason"]
    assert steps[1]["inferred_inflight"] >= 14, steps[1]
    assert "a cap of about" not in said


def truncate_last(lines: list[str]) -> list[str]:
    return [*lines[:-1], lines[-1][:-25]]


def garble_first(lines: list[str]) -> list[str]:
    return ["{not json", *lines[1:]]


@pytest.mark.parametrize(
    ("damage", "line", "lost"),
    [(truncate_last, "line 2: truncated", "2 users"), (garble_first, "line 1: not JSON", "1 user")],
    ids=["truncated-last-line", "garbage-first-line"],
)
def test_a_damaged_complete_run_is_named_and_repaired_by_resume(
    tmp_path: Path, damage: Any, line: str, lost: str
) -> None:
    args = ("--models", "gunicorn-gevent", "--levels", "1,2", "--duration", "1", "--warmup", "0")
    run, _ = lab_run(tmp_path / "out", *args)
    steps = run / "steps.jsonl"
    lines = damage(steps.read_text().splitlines())
    steps.write_text("\n".join(lines) + ("\n" if damage is garble_first else ""))
    report = subprocess.run(lab_cli("report", str(run)), capture_output=True, text=True)
    assert report.returncode == 0, report.stderr
    assert f"steps.jsonl: {line}" in report.stderr
    assert f"planned but not recorded: gunicorn-gevent {lost} trial 1" in report.stderr
    assert "planned but not recorded" in (run / "report.html").read_text()
    resumed = subprocess.run(
        lab_cli("run", "--resume", str(run)), capture_output=True, text=True, timeout=240
    )
    assert resumed.returncode == 0, resumed.stderr
    assert "1 planned step(s) missing or unreadable" in resumed.stderr
    users = sorted(json.loads(line)["users"] for line in steps.read_text().splitlines())
    assert users == [1, 2]
    again = subprocess.run(lab_cli("run", "--resume", str(run)), capture_output=True, text=True)
    assert again.returncode == 0 and "already complete" in again.stderr


def test_a_best_model_below_the_ideal_with_no_cause_is_crowned_only_with_that_said() -> None:
    slow = replace(user_step(50, 300, 120), model="slow")  # 60% of the ideal, nothing found
    slower = replace(user_step(50, 250, 120), model="slower")
    (ranking,) = judge(build([slow, slower]))
    assert ranking.best_rps[0] == "slow"
    assert "slow is best only as measured: below the ideal with no resource saturated" in (
        sentence(ranking)
    )


@pytest.mark.parametrize(
    ("latency", "capped"),
    [({"p50": 103.1, "mean": 399.6}, True), ({"p50": 103.1, "mean": 108.0}, False)],
    ids=["unfair-queue", "no-queue"],
)
def test_a_queue_that_serves_its_waiters_unfairly_is_still_a_cap(
    latency: dict[str, float], capped: bool
) -> None:
    """gunicorn-gevent on an app holding a gevent-patched semaphore of 4, at 20 users (a CI run):
    40 req/s, p50 103 ms against d = 100 ms, yet p90 1.3 s and mean 400 ms, since the semaphore
    lets the latest waiter through first. By p50 alone nothing queued ('cause not found'); the
    mean, Little's law's own figure (40 req/s x 0.4 s = 16 of 20 in flight), says they did."""
    measured = Measured("2026-01-01T00:00:00+00:00", 2.0, 80, 80, latency_ms=latency)
    sampled = Sampled(server_cpu_pct=4.0, server_rss_mb=60, upstream_max_inflight=-1)
    record = assessed(step_record("run", StepKey("m", "closed", 20, None, 1), measured, sampled),
                      capacity(requests=20))  # fmt: skip
    assert ("capped_unexplained" in record.evidence.flags) is capped, record.evidence.limit_reason
    if capped:
        assert "(mean 400 ms)" in record.evidence.details["capped_unexplained"]["queueing"]
