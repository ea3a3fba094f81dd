"""Generator scale-out: several locust workers under one master, their histograms merged exactly.

Real parts: a real server and upstream on loopback, real locust master and workers over locust's
own link, and `lab generator --connect` as a separate process for the remote case. The machine is
small and shared, so throughput is compared with a generous margin, never in absolute terms.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from lab.backends.base import LocalServer
from lab.run.generator import Generator, Outcome, follow
from lab.system import procs
from loadgen.protocol import Done, Start
from servers.common import expected_body
from tests.helpers import lab_cli

PATH = "/io?delay_ms=50"
USERS = 12  # ideal 240 req/s at 50 ms: far below what one generator manages here


def step(server: LocalServer, tmp_path: Path, **fleet: object) -> tuple[Outcome, int]:
    """One step; returns what the lab read and the latencies it merged into the .hlog."""
    start = Start(
        base_url=server.url,
        path=PATH,
        settle_s=1.0,
        duration_s=3.0,
        timeout_s=10.0,
        expected_body=expected_body(PATH).decode(),
        users=USERS,
        **fleet,  # type: ignore[arg-type]
    )
    merged: list[int] = []
    with Generator(start, log_path=tmp_path / "loadgen.log") as gen:
        outcome = follow(gen, on_histogram=lambda _s, _e, h: merged.append(h.get_total_count()))
    assert outcome.done is not None, outcome.failure or gen.proc.log_tail()
    return outcome, sum(merged)


def assert_exact(outcome: Outcome, merged: int, parts: int) -> Done:
    done = outcome.done
    assert done is not None
    assert len(done.parts) == parts
    assert all(p.ok > 0 for p in done.parts), done.parts  # every worker got users
    assert merged == done.ok == sum(p.ok for p in done.parts) == sum(outcome.counted.values())
    assert done.errors == {}
    return done


def test_two_generators_merge_exactly_and_match_one(start_model, tmp_path):
    server = start_model("gunicorn-gevent")
    one, one_merged = step(server, tmp_path)
    two, two_merged = step(server, tmp_path, generators=2)
    assert one.done is not None and one_merged == one.done.ok
    done = assert_exact(two, two_merged, parts=2)
    rps_one, rps_two = one.done.ok / one.done.duration_s, done.ok / done.duration_s
    assert abs(rps_two - rps_one) <= 0.25 * rps_one, (rps_one, rps_two)


def test_remote_worker_over_loopback_completes(start_model, tmp_path):
    server = start_model("gunicorn-gevent")
    master = f"127.0.0.1:{procs.free_port()}"
    argv = lab_cli("generator", "--connect", master, "--steps", "1", "--log", str(tmp_path / "w"))
    remote = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        outcome, merged = step(server, tmp_path, generators=0, remote_generators=1, master=master)
        assert_exact(outcome, merged, parts=1)
        output, _ = remote.communicate(timeout=30)
    finally:
        remote.kill()
    assert remote.returncode == 0, output
    assert "served step 1" in output


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (
            [
                "run",
                "--mode",
                "open",
                "--rates",
                "10",
                "--generators",
                "3",
                "--max-outstanding",
                "2",
            ],
            "3 generator processes share it",
        ),
        (["run", "--remote-generators", "1", "--master", "10.9.8.7:5557"], "not a loopback"),
        (["run", "--generators", "0"], "needs --remote-generators"),
        (["generator", "--connect", "10.9.8.7:5557"], "not a loopback"),
        (["generator", "--connect", "nowhere"], "HOST:PORT"),
    ],
    ids=[
        "open-loop-cap-too-small",
        "remote-master-refused",
        "zero-generators",
        "remote-connect",
        "bad",
    ],
)
def test_bad_generator_options_fail_cleanly(args, needle, tmp_path):
    extra = ["--out", str(tmp_path), "--models", "gunicorn-gevent"] if args[0] == "run" else []
    done = subprocess.run(lab_cli(*args, *extra), capture_output=True, text=True, timeout=60)
    output = done.stdout + done.stderr
    assert done.returncode == 2, output
    assert needle in output and "Traceback" not in output


def test_a_models_report_carries_each_models_interval_exactly() -> None:
    """What a web-UI worker sends per roll arrives as the same counts, and adding two workers'
    intervals to the master's second gives the sum of their counts (never merged percentiles)."""
    from loadgen.fanout import ModelsReport
    from loadgen.live import ModelIntervals

    worker = ModelIntervals()
    for ms in (50.0, 51.0, 120.0):
        worker.on_request("uwsgi-gevent /io", ms)
    worker.on_request("uwsgi-threads /io", 10.0, exception=ConnectionRefusedError())
    report = ModelsReport.from_data(ModelsReport.of(7, worker.take(), 12.5).to_data())
    assert worker.take() == {}  # taken: the next roll starts from nothing
    master = ModelIntervals()
    for _ in range(2):  # two workers' identical reports
        for model, interval in report.intervals().items():
            master.add(model, interval)
    got = master.take()
    assert got["uwsgi-gevent"].hist.get_total_count() == 6 and got["uwsgi-gevent"].requests == 6
    assert got["uwsgi-threads"].requests == 2 and sum(got["uwsgi-threads"].errors.values()) == 2
    assert got["uwsgi-gevent"].hist.get_value_at_percentile(100) >= 120_000  # µs


@pytest.mark.parametrize(
    "answers", [[3, 4], [3, None], [0, 0]], ids=["counted", "one-unknown", "none"]
)
def test_a_workers_answers_by_arrival_reach_the_master_and_add_up(
    answers: list[int | None],
) -> None:
    """Each worker's answers that arrived in a second (whenever sent) cross the link as they
    are, and the master's merge adds them; one worker that did not count leaves the second's
    count unknown (the histogram's count is read instead), never a partial sum."""
    from loadgen.fanout import Report
    from loadgen.recording import Interval, merged

    reports = [Report.of(1, Interval(answers=a), (0, 0), 0.0, []) for a in answers]
    got = [Report.from_data(r.to_data()).interval().answers for r in reports]
    assert got == answers
    total = merged([r.interval() for r in reports]).answers
    assert total == (None if None in answers else sum(a or 0 for a in answers))
