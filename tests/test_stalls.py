"""Stalls seen: a server that stops answering for seconds is flagged, its waiting requests counted.

A real `lab run` against a real server whose whole process tree the test stops (SIGSTOP) for a
few seconds across the end of the measured window, as a GC pause or a lock convoy would; and a
real generator against a socket that accepts and never answers, for the requests still unanswered
after the drain. Both closed loop: the loop that used to count requests by the clock, so the
requests a stall held at the cut-off vanished.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from http.server import ThreadingHTTPServer
from pathlib import Path

import psutil
import pytest

from analysis.judge import judge
from analysis.loading import load
from lab.record.step import StepKey, step_record
from lab.run.generator import measured_from, run_step
from loadgen.protocol import Start
from tests.fakeservers import Freezing, frozen_later
from tests.helpers import striking
from tests.labrun import LabRun

MODEL = "gunicorn-asyncio"


def _tree(pid: int) -> list[psutil.Process]:
    root = psutil.Process(pid)
    return [root, *root.children(recursive=True)]


def _stop_server(run: LabRun, after_s: float, stop_s: float, done: threading.Event) -> None:
    """`after_s` into the measured window, stop the server's every process for `stop_s`."""
    server = run.wait_measuring(MODEL, 0)
    time.sleep(after_s)
    tree = _tree(server.pid)
    try:
        for proc in tree:
            os.kill(proc.pid, signal.SIGSTOP)
        done.wait(stop_s)
    finally:
        for proc in tree:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGCONT)


@pytest.mark.parametrize("generators", ["1", "2"], ids=["1-generator", "2-generators"])
def test_a_server_that_stops_answering_is_flagged_counted_and_not_crowned(
    tmp_path: Path, generators: str
) -> None:
    """Stopped 4 s into a 6 s window for 3 s: the last seconds have no answers while the users
    wait (flag `stalled`, its limit named or kept as secondary evidence), and the requests the
    stop held at the cut-off are counted with their real latency, seconds long (counted by the
    clock they would have vanished), on one generator process or shared over two."""
    args = ("--models", MODEL, "--levels", "8", "--duration", "6", "--warmup", "0")
    args += ("--generators", generators)
    run = LabRun(tmp_path, *args, "--delay-ms", "20")
    try:
        with striking(_stop_server, run, 4.0, 3.0):
            assert run.finish() == 0, run.output()
    finally:
        run.kill()
    (step,) = run.steps()
    assert step["generators"] == int(generators)
    assert "stalled" in step["flags"], (step["flags"], step["timeseries"]["rps"])
    stall = step["details"]["stalled"]
    assert stall["seconds"] and max(stall["answers_per_s"]) <= 0.1 * stall["median_per_s"]
    assert "stall" in (step["limited_by"], *step["also_limited_by"]), step["limit_reason"]
    # the users' requests held across the cut-off answered in the drain: counted, seconds long
    assert step["latency_ms"]["max"] >= 1500, step["latency_ms"]
    assert step["requests"] >= step["ok"] > 0
    (ranking,) = judge(load(run.dir).points)
    assert ranking.best_p99 == ()


def test_requests_still_unanswered_after_the_drain_are_lower_bounds(tmp_path: Path) -> None:
    """A server that answers, then stops answering half way through the window, with a timeout
    beyond the drain's longest wait: every user's last request, sent inside the window, is
    unanswered after the drain, recorded with its age since its send (a lower bound), counted
    among the step's requests and not among its answers."""
    with frozen_later(Freezing) as url:
        done = run_step(Start(url, "/", 0.3, 1.0, 12.0, users=4), tmp_path / "gen.log")
    cut = done.closed_loop
    assert cut["unfinished"] == 4 and done.requests == done.ok + 4, (cut, done.requests, done.ok)
    assert "max" in cut["all_lower_bounds"] and done.all_latency_ms["max"] >= 9000
    record = step_record("run", StepKey("m", "closed", 4, None, 1), measured_from(done))
    assert record.load.unfinished == 4 and record.latency.unanswered_share > 0
    assert "max" in record.latency.latency_all_lower_bounds


@pytest.mark.parametrize("generators", [2], ids=["2-generators"])
def test_on_several_generators_the_unanswered_are_lower_bounds_and_every_route_adds_up(
    tmp_path: Path, generators: int
) -> None:
    """The same freezing server, a mix of two routes, the users shared over worker processes:
    each worker's last requests, sent inside the window, are unanswered after its drain; the
    master counts them as requests with their ages as lower bounds, exactly as one generator
    does, and the routes' requests add up to the step's."""
    Freezing.first.clear()
    server = ThreadingHTTPServer(("127.0.0.1", 0), Freezing)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    mix = [{"label": f"/r{i}", "method": "GET", "path": f"/r{i}", "weight": 1} for i in (1, 2)]
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        start = Start(url, "/", 0.3, 1.0, 12.0, users=4, generators=generators, mix=mix)
        done = run_step(start, tmp_path / "gen.log")
    finally:
        server.shutdown()
    cut = done.closed_loop
    assert cut["unfinished"] == 4 and done.requests == done.ok + 4, (cut, done.requests, done.ok)
    assert cut["ok_in_window"] > 0 and 9 <= cut["drain_s"] <= 11, cut
    assert "max" in cut["all_lower_bounds"] and done.all_latency_ms["max"] >= 9000
    assert len(done.parts) == generators
    assert sum(p.requests for p in done.parts) == done.requests, done.parts
    routes = done.routes.values()
    assert sum(r["requests"] for r in routes) == done.requests, done.routes
    assert sum(r["unfinished"] for r in routes) == 4, done.routes
    record = step_record("run", StepKey("m", "closed", 4, None, 1), measured_from(done))
    assert record.load.unfinished == 4 and record.latency.unanswered_share > 0
    assert "max" in record.latency.latency_all_lower_bounds
