"""oha as the engine of closed-loop steps: USERS connections, each sending as soon as its answer
arrived, against real servers on loopback; every request in the lab's record as in open loop,
the users split over processes merged exactly, refusals counted, and a server that closes every
connection (as uWSGI's `--http-socket` does) costing reconnects, not errors. Skipped, with the
reason, where oha is not installed."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lab.record.step import StepKey, step_record
from lab.run import engine
from lab.run.generator import measured_from
from lab.system import procs
from loadgen.oha import figures
from loadgen.protocol import Done, Start
from tests.helpers import QuietHandler
from tests.ohastep import calm, needs_oha, oha_step

__all__ = ["calm"]  # the fixture, shared with tests/test_oha_engine.py (tests/ohastep.py)


def _closed_step(
    url: str, tmp_path: Path, users: int = 4, **kw: Any
) -> tuple[Done, list[tuple[float, float, int]]]:
    """One closed-loop step on oha: `users` connections, each sending on its answer."""
    return oha_step(url, tmp_path, rate_rps=None, max_outstanding=0, users=users, **kw)


def _closed_counts_add_up(done: Done) -> None:
    """The lab's closed-loop counting rules, whatever the engine: no schedule, nothing dropped."""
    cut = done.closed_loop
    assert done.open_loop is None and set(cut) >= {"unfinished", "ok_in_window", "drain_s"}
    assert done.requests == done.ok + sum(done.errors.values()) + cut["unfinished"]
    assert "dropped" not in done.timeseries and "dropped" not in done.failed_latency_ms


@needs_oha
def test_a_closed_loop_step_on_oha_keeps_every_request(calm: str, tmp_path: Path) -> None:
    """4 connections, each sending as soon as its answer arrived: every answer in the `.hlog`
    (the drain's too), the per-second series adding up to the window's answers, the record a
    closed-loop step's with the server's figures (each request about the server's 2 ms)."""
    done, seen = _closed_step(calm, tmp_path, expected_body="ok")
    _closed_counts_add_up(done)
    assert done.errors == {} and done.ok == done.requests > 100
    assert sum(n for *_, n in seen) == done.ok and seen[-1][1] < 0
    assert sum(done.timeseries["rps"]) == done.closed_loop["ok_in_window"]
    assert 2 <= done.latency_ms["p50"] <= done.latency_ms["p99"] < 1000
    assert done.late_sends == "" and done.client_cpu_pct > 0
    record = step_record("run", StepKey("m", "closed", 4, None, 1), measured_from(done))
    assert record.load.throughput_rps == pytest.approx(
        done.closed_loop["ok_in_window"] / 2, rel=0.01
    )


@needs_oha
def test_closed_loop_users_split_over_oha_processes_merge_exactly(
    calm: str, tmp_path: Path
) -> None:
    done, seen = _closed_step(calm, tmp_path, users=5, generators=2, expected_body="ok")
    _closed_counts_add_up(done)
    assert [p.source for p in done.parts] == ["oha-0", "oha-1"]
    assert all(p.open_loop is None and p.requests > 0 for p in done.parts)
    assert sum(p.ok for p in done.parts) == done.ok == sum(n for *_, n in seen)


@needs_oha
def test_a_closed_loop_against_a_refusing_server_counts_each_refusal(tmp_path: Path) -> None:
    """Refused connections have no response and no time: the window takes its share of them
    by its length (all of them without a settle), each a failure of at least 0 ms."""
    url = f"http://127.0.0.1:{procs.free_port()}"
    done, seen = _closed_step(url, tmp_path, users=2, settle_s=0.0)
    _closed_counts_add_up(done)
    assert done.ok == 0 and set(done.errors) == {"refused"} and done.requests > 0
    assert "p99" in done.closed_loop["all_lower_bounds"] and sum(n for *_, n in seen) == 0


class _Closing(QuietHandler):
    """Answers "ok" over HTTP/1.1 and closes the connection without saying so, as uWSGI's
    `--http-socket` does: the client finds out when it sends its next request."""

    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self.answer(b"ok")
        self.close_connection = True


@pytest.fixture()
def closing() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Closing)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@needs_oha
def test_a_server_that_closes_every_connection_costs_reconnects_not_errors(
    closing: str, tmp_path: Path
) -> None:
    """oha sends on a kept-alive connection the server closed after its answer and fails at
    once: a reconnect, counted as such (the lab's own engine resends silently), not an error."""
    done, _ = _closed_step(closing, tmp_path, users=2, expected_body="ok")
    _closed_counts_add_up(done)
    assert done.ok > 0 and done.errors == {}, done.errors
    assert 0 < done.closed_loop["reconnects"] <= done.ok + 2
    start = Start(closing, "/", 0.3, 2.0, 5.0, users=2, engine="oha", generators=1)
    assert engine.evidence("oha", start, done)["reconnects"] == done.closed_loop["reconnects"]


@settings(max_examples=60, deadline=None)
@given(
    kept=st.integers(0, 1000),
    counted=st.integers(0, 1000),
    settle=st.floats(0, 10),
    window=st.floats(0.1, 60),
)
def test_a_closed_window_takes_its_share_of_the_untimed_failures_by_time(
    kept: int, counted: int, settle: float, window: float
) -> None:
    """Closed loop has no schedule: the window takes the failures oha only counted in
    proportion to its share of the run's time, all of them without a settle, none dropped."""
    spec = figures.Spec(0.0, settle, window, 5.0, None, closed=True)
    room = spec.closed_room(kept, counted) - kept
    assert 0 <= room <= counted
    if settle == 0:
        assert room == counted
    errors = {"Connection refused (os error 111)": counted}
    assert sum(figures.in_window(errors, room).values()) == room


STALE = st.sampled_from([*figures.STALE_CONNECTION, "Connection refused (os error 111)"])


@settings(max_examples=60, deadline=None)
@given(errors=st.dictionaries(STALE, st.integers(0, 50)), answered=st.integers(0, 80))
def test_reconnects_are_at_most_one_per_answer_and_nothing_is_lost(
    errors: dict[str, int], answered: int
) -> None:
    """A connection goes stale only after an answer: at most one reconnect per answered request,
    the rest of the stale-connection failures stay failures, and other failures are untouched."""
    left, taken = figures.reconnects(errors, answered)
    assert 0 <= taken <= answered and taken + sum(left.values()) == sum(errors.values())
    refused = "Connection refused (os error 111)"
    assert left.get(refused, 0) == errors.get(refused, 0)
    stale = sum(n for m, n in errors.items() if m != refused)
    assert taken == min(stale, answered)
