"""Open loop on several generator processes: the arrival process split, run and merged exactly.

The schedules are checked as pure functions (their union must be the arrival process asked for);
the rest with real processes on loopback: a locust master and its workers, the mock upstream as
a target far from its limit, a socket that never answers, and `lab generator --connect` as a
separate process for the remote case.
"""

from __future__ import annotations

import random
import socket
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from lab.backends.base import LocalServer
from lab.record import hist
from lab.run.generator import Generator, Outcome, follow
from lab.run.generators import Generators, served
from lab.system import procs
from loadgen.protocol import (
    SERVED_NOTHING,
    SERVED_STEP,
    SERVED_WARMUP,
    Measuring,
    OpenLoopFigures,
    Start,
    missing_generators,
)
from loadgen.shares import ShareResult, intended_offsets, merge, split
from tests.helpers import lab_cli

PATH = "/delay?ms=5"  # the upstream itself: a target far from its limit at these rates
SPEC = Start(base_url="http://127.0.0.1:1", path="/", settle_s=1, duration_s=3, timeout_s=5)


def arrivals(start: Start, n: int, until_s: float) -> list[float]:
    """Every share's intended times up to `until_s`, merged and sorted."""
    times: list[float] = []
    for share in split(start, n, begin_at=0.0):
        assert share.rate_rps is not None
        rng = random.Random(share.seed)
        for t in intended_offsets(share.rate_rps, share.arrival, rng, share.offset_s):
            if t >= until_s:
                break
            times.append(t)
    return sorted(times)


@pytest.mark.parametrize("n", [2, 3, 7], ids=["two", "three", "seven"])
def test_merged_constant_arrivals_are_evenly_spaced(n: int) -> None:
    rate = 1200.0
    start = replace(SPEC, rate_rps=rate, max_outstanding=64)
    times = arrivals(start, n, until_s=2.0)
    assert len(times) == 2400
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    assert min(gaps) == pytest.approx(1 / rate, rel=1e-6)
    assert max(gaps) == pytest.approx(1 / rate, rel=1e-6)


@pytest.mark.parametrize("n", [2, 5], ids=["two", "five"])
def test_merged_poisson_arrivals_pass_a_dispersion_check(n: int) -> None:
    """Counts per bin of a Poisson process have variance = mean (index of dispersion 1); the
    merged streams must too, at the full rate, and each share on its own seed."""
    rate, seconds, bin_s = 1000.0, 20.0, 0.05
    start = replace(SPEC, rate_rps=rate, max_outstanding=64, arrival="poisson", seed=7)
    assert len({s.seed for s in split(start, n, 0.0)}) == n
    times = arrivals(start, n, until_s=seconds)
    counts = [0] * int(seconds / bin_s)
    for t in times:
        counts[int(t / bin_s)] += 1
    mean = statistics.fmean(counts)
    assert mean == pytest.approx(rate * bin_s, rel=0.05)
    assert statistics.variance(counts) / mean == pytest.approx(1.0, abs=0.15)


def test_the_cap_is_shared_out_and_must_cover_every_generator() -> None:
    start = replace(SPEC, rate_rps=900.0, max_outstanding=10)
    shares = split(start, 3, begin_at=12.5)
    assert [s.max_outstanding for s in shares] == [4, 3, 3]
    assert sum(s.rate_rps or 0 for s in shares) == pytest.approx(900.0)
    assert {s.begin_at for s in shares} == {12.5} and not any(s.distributed for s in shares)
    with pytest.raises(ValueError, match="cannot be shared by 11"):
        split(start, 11, begin_at=0.0)


def test_merge_adds_counts_and_takes_the_youngest_unanswered_age() -> None:
    def share(sent: int, unfinished: int, floor: float | None) -> ShareResult:
        figures = OpenLoopFigures(500.0, 499.0, sent, 2, unfinished, {}, sent + 2, sent, 2, 9)
        return ShareResult(figures, "", floor)

    empty = hist.encode(hist.new_histogram())
    shares = [share(100, 0, None), share(90, 3, 800.0), share(95, 1, 650.0)]
    shares = [ShareResult(s.figures, empty, s.floor_ms) for s in shares]
    got = merge(1500.0, shares, {"p50": 10.0, "p99": 700.0, "max": 900.0})
    assert (got.sent, got.dropped, got.unfinished, got.scheduled) == (285, 6, 4, 291)
    assert got.achieved_rate_rps == pytest.approx(1497.0) and got.ok_in_window == 27
    assert got.lower_bounds == ("p99", "max")


def test_automatic_count_follows_the_rate() -> None:
    auto = Generators(local=7, auto=True)
    assert auto.for_step(None, 0) == 7  # closed loop: every one
    assert auto.for_step(500.0, 500) == 1
    assert auto.for_step(20_000.0, 500) == 7  # at most the client cores
    assert auto.for_step(20_000.0, 3) == 3  # never more than the cap can be shared by
    assert Generators(local=7, remote=2, auto=True).for_step(1500.0, 500) == 0
    assert Generators(local=2).for_step(100.0, 500) == 2  # counted by the user: as given
    assert auto.more(1) == 2 and auto.more(4) == 7 and auto.more(7) is None


def test_a_remote_generator_that_left_is_named_with_what_to_do() -> None:
    assert "remote generator(s) did not come or left" in missing_generators(3, 3, 4, 30.0)
    assert "--steps" in missing_generators(3, 3, 4, 30.0)
    assert "did not come" not in missing_generators(1, 3, 0, 30.0)
    assert served({SERVED_STEP}) == "step" and served({SERVED_WARMUP, SERVED_STEP}) == "warmup"
    assert served({SERVED_NOTHING}) == "nothing" and served({SERVED_STEP, 1}) == "failed"


def open_step(target: str, tmp_path: Path, rate: float, **fleet: object) -> Outcome:
    start = Start(
        base_url=target,
        path=PATH,
        settle_s=1.0,
        duration_s=4.0,
        timeout_s=10.0,
        rate_rps=rate,
        max_outstanding=200,
        **fleet,  # type: ignore[arg-type]
    )
    with Generator(start, log_path=tmp_path / "loadgen.log") as gen:
        outcome = follow(gen)
    assert outcome.done is not None, outcome.failure or gen.proc.log_tail()
    return outcome


def assert_merged_exactly(outcome: Outcome, parts: int) -> OpenLoopFigures:
    done = outcome.done
    assert done is not None and done.open_loop is not None
    figures = done.open_loop
    assert len(done.parts) == parts
    shares = [p.open_loop or {} for p in done.parts]
    for key in ("sent", "dropped", "unfinished", "completed", "scheduled", "ok_in_window"):
        assert getattr(figures, key) == sum(s[key] for s in shares), key
    assert done.ok == sum(p.ok for p in done.parts)
    assert sum(outcome.counted.values()) == done.ok + figures.unfinished  # ages: lower bounds
    assert figures.completed + figures.unfinished == figures.sent
    return figures


def test_two_generators_at_600_each_send_their_share_on_time(
    upstream: LocalServer, tmp_path: Path
) -> None:
    outcome = open_step(upstream.url, tmp_path, 1200.0, generators=2)
    figures = assert_merged_exactly(outcome, parts=2)
    assert figures.dropped == 0 and figures.unfinished == 0
    assert figures.achieved_rate_rps >= 0.97 * 1200
    for part in outcome.done.parts if outcome.done else ():
        share = part.open_loop or {}
        assert share["rate_rps"] == 600.0 and share["achieved_rate_rps"] >= 0.97 * 600
        assert share["sent"] == pytest.approx(600 * 4.0, abs=3)  # its share, on its schedule


def test_a_remote_generator_on_loopback_takes_its_share_and_counts_measured_steps(
    upstream: LocalServer, tmp_path: Path
) -> None:
    """`lab generator --steps 1` serves a warm-up without counting it, then the measured step,
    in which it sends its half of the arrivals."""
    master = f"127.0.0.1:{procs.free_port()}"
    argv = lab_cli("generator", "--connect", master, "--steps", "1", "--log", str(tmp_path / "w"))
    remote = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    fleet = {"generators": 1, "remote_generators": 1, "master": master}
    try:
        open_step(upstream.url, tmp_path, 200.0, warmup=True, **fleet)
        outcome = open_step(upstream.url, tmp_path, 400.0, **fleet)
        output, _ = remote.communicate(timeout=30)
    except AssertionError as e:  # what `lab generator` said, and its workers' log, with the failure
        remote.kill()
        log = tmp_path / "w"
        said = remote.communicate()[0] + (log.read_text(errors="replace") if log.exists() else "")
        raise AssertionError(f"{e}\nlab generator said:\n{said}") from None
    finally:
        remote.kill()
    figures = assert_merged_exactly(outcome, parts=2)
    assert figures.dropped == 0 and figures.sent == pytest.approx(1600, abs=3)
    assert all((p.open_loop or {}).get("sent", 0) >= 790 for p in outcome.done.parts), outcome.done
    assert remote.returncode == 0, output
    assert "served a warm-up" in output and "served step 1 " in output and "step 2" not in output


def test_unanswered_requests_of_every_generator_are_lower_bounds(tmp_path: Path) -> None:
    """A socket that never answers: each generator's requests are still pending after its drain;
    their ages are merged as lower bounds, never as answers."""
    hole = socket.create_server(("127.0.0.1", 0), backlog=512)
    try:
        start = Start(
            base_url=f"http://127.0.0.1:{hole.getsockname()[1]}",
            path="/",
            settle_s=0.5,
            duration_s=1.0,
            timeout_s=12.0,
            rate_rps=20.0,
            max_outstanding=100,
            generators=2,
        )
        with Generator(start, log_path=tmp_path / "loadgen.log") as gen:
            outcome = follow(gen)
    finally:
        hole.close()
    figures = assert_merged_exactly(outcome, parts=2)
    assert outcome.done is not None and outcome.done.ok == 0
    assert figures.unfinished == figures.sent >= 18
    assert {"p50", "p99", "max"} <= set(figures.lower_bounds)


def remote_worker(
    url: str, *, duration_s: float, timeout_s: float, rate: float, generators: int = 1
) -> tuple[subprocess.Popen[bytes], Start]:
    """A `loadgen.worker_node` (as `lab generator` starts one) waiting for a master on a free
    port, and an open-loop step of `generators` local processes plus it, for that master."""
    master = f"127.0.0.1:{procs.free_port()}"
    argv = [sys.executable, "-m", "loadgen.worker_node", master]
    worker = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    start = Start(
        *(url, PATH, 0.5, duration_s, timeout_s),
        rate_rps=rate,
        max_outstanding=round(rate / 2),
        generators=generators,
        remote_generators=1,
        master=master,
    )
    return worker, start


def test_a_remote_generator_that_leaves_during_the_step_is_named(
    upstream: LocalServer, tmp_path: Path
) -> None:
    """Killed mid-step, its share would silently go missing: the step fails and says who left."""
    remote, start = remote_worker(upstream.url, duration_s=8.0, timeout_s=10.0, rate=200.0)
    try:
        with Generator(start, log_path=tmp_path / "loadgen.log") as gen:
            outcome = follow(gen, on_measuring=lambda _: remote.kill())
    finally:
        remote.kill()
        remote.wait()
    assert outcome.done is None
    assert "left during the step" in outcome.failure and "lab generator" in outcome.failure


def test_a_worker_whose_master_vanished_leaves_after_its_step(
    upstream: LocalServer, tmp_path: Path
) -> None:
    """A master killed mid-step never sends its quit (as a quit lost on a busy host): the worker
    leaves once its step is long over, not after locust's 60 s heartbeat limit, so a remote
    `lab generator` is ready for the next step's master (which waits 30 s for its workers)."""
    worker, start = remote_worker(
        upstream.url, duration_s=1.0, timeout_s=2.0, rate=100.0, generators=0
    )
    try:
        with Generator(start, log_path=tmp_path / "loadgen.log") as gen:
            for message in gen.messages():
                if isinstance(message, Measuring):
                    gen.proc.popen.kill()  # no quit, no goodbye
                    break
        killed = time.monotonic()
        worker.wait(timeout=45)
        assert time.monotonic() - killed < 30
    finally:
        worker.kill()
        worker.wait()
