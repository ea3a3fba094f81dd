"""oha as the engine of open-loop steps: a real oha against real servers on loopback, its records
turned into the lab's (every request in the histograms, failures by kind, lower bounds), a failed
or killed oha a failed step, the rate split over processes merged exactly; and which engine a
step gets, and why, open or closed loop (closed-loop steps on oha: tests/test_oha_closed.py).
Skipped, with the reason, where oha is not installed."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lab.config.scenario import load_scenario
from lab.record.errors import LabError
from lab.record.login import Login
from lab.record.step import StepKey, step_record
from lab.run import engine
from lab.run.generator import measured_from, run_step
from lab.run.generators import Generators
from lab.system import procs
from loadgen.oha import figures
from loadgen.protocol import Done, Start
from tests.fakeservers import Freezing, frozen_later, shedder
from tests.ohastep import calm, needs_oha, oha_step

__all__ = ["calm"]  # the fixture, shared with tests/test_oha_closed.py


@pytest.fixture()
def shedding() -> Iterator[str]:
    """A server that holds 2 requests for 20 ms each and answers the rest 503 at once."""
    yield from shedder(limit=2, delay_ms=20)


def _counts_add_up(done: Done) -> None:
    """The lab's counting rules, whatever the engine."""
    ol = done.open_loop
    assert ol is not None
    assert ol.scheduled == ol.sent + ol.not_sent and ol.not_sent == ol.dropped
    assert done.requests == ol.sent == ol.completed + ol.unfinished
    assert done.requests == done.ok + sum(done.errors.values()) + ol.unfinished


@needs_oha
def test_every_request_oha_sent_is_in_the_lab_s_record(calm: str, tmp_path: Path) -> None:
    done, seen = oha_step(calm, tmp_path, expected_body="ok")
    _counts_add_up(done)
    assert done.errors == {} and done.ok == done.requests
    assert done.requests == pytest.approx(400, abs=4)  # 200 req/s for 2 s
    assert sum(n for *_, n in seen) == done.ok  # every answer in the .hlog, the drain's too
    assert [(a, b) for a, b, _ in seen[:2]] == [(0.0, 1.0), (1.0, 2.0)] and seen[-1][1] < 0
    assert sum(done.timeseries["rps"]) == done.open_loop.ok_in_window  # type: ignore[union-attr]
    assert 2 <= done.latency_ms["p50"] <= done.latency_ms["p99"] < 1000
    record = step_record("run", StepKey("m", "open", None, 200.0, 1), measured_from(done))
    assert (
        record.load.throughput_rps == pytest.approx(200, rel=0.05) and record.evidence.flags == ()
    )
    assert record.load.scheduled == record.load.sent and record.latency.unanswered_share == 0


@needs_oha
def test_a_server_that_sheds_load_is_timed_on_oha(shedding: str, tmp_path: Path) -> None:
    """503s have a response: oha keeps their times, so they are timed by kind and by second."""
    done, _ = oha_step(shedding, tmp_path, rate_rps=300.0, expected_body="ok")
    _counts_add_up(done)
    assert done.errors.get("http_5xx", 0) > 0 and done.ok > 0
    assert sum(done.timeseries["errors"]) == done.errors["http_5xx"]
    assert done.failed_latency_ms["http_5xx"]["p50"] < done.latency_ms["p50"]  # shed at once


@needs_oha
def test_a_server_that_refuses_is_every_request_a_lower_bound(tmp_path: Path) -> None:
    """Refused connections have no response: oha only counts them, so each is a failure with a
    latency of at least 0, every percentile over every request a lower bound."""
    url = f"http://127.0.0.1:{procs.free_port()}"
    done, seen = oha_step(url, tmp_path, settle_s=0.0)
    _counts_add_up(done)
    assert done.ok == 0 and done.errors == {"refused": done.requests}
    assert done.requests == pytest.approx(400, abs=4)
    assert done.open_loop is not None and "p99" in done.open_loop.all_lower_bounds
    record = step_record("run", StepKey("m", "open", None, 200.0, 1), measured_from(done))
    assert "no_responses" in record.evidence.flags and record.latency.unanswered_share == 1.0
    assert sum(n for *_, n in seen) == 0


class _Freezing(Freezing):
    """tests/fakeservers.py's freezing server (tests/test_stalls.py's), frozen later: after the
    settle and most of the first second, then holding every request longer than any test."""

    first: list[float] = []
    FREEZE_AFTER_S = 0.3 + 0.8


@needs_oha
def test_a_server_that_stalls_shows_as_timeouts_drops_and_a_silent_second(
    tmp_path: Path,
) -> None:
    """Half way through the window the server stops answering: oha's 4 connections time out
    (counted, at the timeout, lower bounds), the arrivals queued behind them are never sent
    (dropped, timed to oha's end: lower bounds), and the second after the stall has no answer."""
    with frozen_later(_Freezing) as url:
        done, _ = oha_step(url, tmp_path, rate_rps=50.0, timeout_s=1.5, max_outstanding=4)
    _counts_add_up(done)
    ol = done.open_loop
    assert ol is not None and done.ok > 0 and done.errors.get("timeout", 0) >= 4, done.errors
    assert ol.dropped > 0 and "p99" in ol.all_lower_bounds, ol
    assert done.failed_latency_ms["timeout"]["p50"] == pytest.approx(1500, rel=0.01)
    assert done.timeseries["rps"][-1] == 0 and done.timeseries["p99_ms"][-1] != 0  # NaN
    assert ol.scheduled == pytest.approx(100, abs=3)


@needs_oha
def test_the_rate_split_over_oha_processes_is_merged_exactly(calm: str, tmp_path: Path) -> None:
    done, seen = oha_step(calm, tmp_path, rate_rps=400.0, generators=2, expected_body="ok")
    _counts_add_up(done)
    assert [p.source for p in done.parts] == ["oha-0", "oha-1"]
    assert sum(p.requests for p in done.parts) == done.requests == pytest.approx(800, abs=6)
    assert sum(p.ok for p in done.parts) == done.ok == sum(n for *_, n in seen)
    assert [p.open_loop["rate_rps"] for p in done.parts if p.open_loop] == [200.0, 200.0]


def _fake_oha(tmp_path: Path, body: str) -> str:
    path = tmp_path / "oha"
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


@pytest.mark.parametrize(
    ("body", "said"),
    [
        ("echo 'no such thing' >&2; exit 3", "oha exited 3: no such thing"),
        ("kill -9 $$", "oha killed by signal 9"),
        ("exit 0", "oha's records could not be read"),
    ],
    ids=["exits-3", "killed", "no-records"],
)
def test_a_failed_or_killed_oha_is_a_failed_step(tmp_path: Path, body: str, said: str) -> None:
    url = f"http://127.0.0.1:{procs.free_port()}"
    start = Start(url, "/", 0.0, 1.0, 2.0, rate_rps=10.0, max_outstanding=4, engine="oha")
    start = Start(**{**vars(start), "engine_path": _fake_oha(tmp_path, body)})
    with pytest.raises(RuntimeError, match=said):
        run_step(start, tmp_path / "gen.log")


OPEN = Start("http://127.0.0.1:1", "/", 0.5, 2.0, 5.0, rate_rps=100.0, max_outstanding=10)
CLOSED = {"rate_rps": None, "max_outstanding": 0, "users": 3}


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"mix": [{"label": "/a", "method": "GET", "path": "/a", "weight": 1}] * 2}, "mix of 2"),
        ({"arrival": "poisson"}, "poisson arrivals"),
        ({"remote_generators": 2, "max_outstanding": 2}, "over 3 generator processes"),
        ({"login": Login()}, "a login per user (POST /login): oha keeps no session"),
        ({**CLOSED, "login": Login()}, "a login per user (POST /login): oha keeps no session"),
        ({**CLOSED, "path": "/items/{n}"}, "placeholders ({uuid}, {n}, ...) filled per request"),
        ({**CLOSED, "mix": [{"label": "/a", "path": "/a", "weight": 1}] * 3}, "mix of 3"),
        ({**CLOSED, "remote_generators": 3}, "3 users over 4 generator processes"),
    ],
    ids=["mix", "poisson", "remote", "login", "closed-login", "closed-placeholders"]
    + ["closed-mix", "closed-remote"],
)
def test_a_step_oha_cannot_run_falls_back_saying_why(change: dict, why: str) -> None:
    start = Start(**{**vars(OPEN), **change})
    chosen = engine.applied(start, "oha", Generators())
    assert chosen.engine == "lab" and why in (engine.cannot(start) or "")
    assert why in engine.evidence("oha", chosen)["why"]


def test_the_lab_s_engine_when_asked_or_oha_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    asked = engine.applied(OPEN, "lab", Generators())
    assert asked.engine == "lab" and engine.evidence("lab", asked)["why"].startswith("asked")
    monkeypatch.setattr(engine, "oha_missing", lambda: "oha is not installed (test)")
    missing = engine.applied(OPEN, "oha", Generators())
    assert missing.engine == "lab"
    assert engine.evidence("oha", missing)["why"] == "oha is not installed (test)"


@pytest.mark.procs  # probes a real binary (tests/tiers.py cannot see it by name)
@needs_oha
@pytest.mark.parametrize(
    ("change", "processes"),
    [({}, 1), (CLOSED, 2), ({**CLOSED, "users": 1}, 1)],
    ids=["open", "closed", "closed-one-user"],
)
def test_oha_runs_a_step_that_sends_one_request_and_the_record_names_it(
    change: dict, processes: int
) -> None:
    """Open or closed loop, one fixed request runs on oha; closed loop's users are split over
    the run's generator processes, never more processes than users."""
    start = Start(**{**vars(OPEN), **change})
    chosen = engine.applied(start, "oha", Generators(local=2, auto=True))
    said = engine.evidence("oha", chosen)
    assert chosen.engine == "oha" and os.access(chosen.engine_path, os.X_OK)
    assert said["name"] == "oha" and said["version"].startswith("oha ") and "why" not in said
    assert chosen.generators == processes


def _run(rows: np.ndarray, errors: dict[str, int], scheduled: int) -> figures.OhaRun:
    intended, sent, end, status = (rows[:, i] for i in range(4))
    size = np.full(len(rows), 2.0)
    return figures.OhaRun(intended, sent, end, status, size, errors, 3.5, scheduled)


ROWS = st.lists(
    st.tuples(
        st.floats(0, 2.99), st.floats(0, 0.05), st.floats(0, 1.5), st.sampled_from([200, 503])
    ),
    max_size=60,
)


@settings(max_examples=40, deadline=None)
@given(rows=ROWS, cut=st.integers(0, 60), refused=st.integers(0, 5))
def test_a_split_merges_to_the_whole(rows: list, cut: int, refused: int) -> None:
    """However the requests fall over processes, their merged figures are the whole's: every
    count added, every histogram added, every request counted once."""
    data = np.array([(i, i + w, i + w + d, s) for i, w, d, s in rows], dtype=float).reshape(-1, 4)
    spec = figures.Spec(100.0, 0.0, 3.0, 5.0, 2)
    whole = figures.tally(_run(data, {"Connection refused": refused}, len(data) + refused), spec)
    first, rest = data[:cut], data[cut:]
    parts = [
        figures.tally(_run(first, {"Connection refused": refused}, len(first) + refused), spec),
        figures.tally(_run(rest, {}, len(rest)), spec),
    ]
    merged = figures.merged(parts)
    assert merged.counts == whole.counts and merged.errors == whole.errors
    assert merged.answers == whole.answers and merged.errors_per_s == whole.errors_per_s
    assert merged.ticks == whole.ticks
    assert (
        sum(h.get_total_count() for h in merged.seconds) + merged.drain.get_total_count()
        == (whole.counts["ok"])
    )
    for kind, h in whole.failed.items():
        assert merged.failed[kind].get_total_count() == h.get_total_count()
    c = whole.counts
    assert c["requests"] == c["ok"] + sum(whole.errors.values()) + c["unfinished"]


@settings(max_examples=40, deadline=None)
@given(rows=ROWS)
def test_answers_per_100ms_are_the_ok_answers_that_arrived_in_each(rows: list) -> None:
    """oha's per-request records fill the sub-second series as the lab's generator does: each
    100 ms bin of the 3 s window counts the ok answers whose end fell in it (counted here by
    hand), and the bins add up to the per-second answers."""
    data = np.array([(i, i + w, i + w + d, s) for i, w, d, s in rows], dtype=float).reshape(-1, 4)
    t = figures.tally(_run(data, {}, len(data)), figures.Spec(100.0, 0.0, 3.0, 5.0, 2))
    ends = [end for _, _, end, status in data if status < 400 and 0 <= end < 3.0]
    assert t.ticks == [sum(1 for e in ends if int(e * 10) == b) for b in range(30)]
    assert [sum(t.ticks[10 * s : 10 * s + 10]) for s in range(3)] == t.answers


@pytest.mark.parametrize(
    ("value", "error"),
    [("lab", None), ("oha", None), ("wrk", "engine must be one of oha, lab")],
    ids=["lab", "oha", "unknown"],
)
def test_a_scenario_names_its_engine(tmp_path: Path, value: str, error: str | None) -> None:
    path = tmp_path / "s.toml"
    path.write_text(f'mode = "open"\nrates = [100]\nengine = "{value}"\n')
    if error is None:
        assert load_scenario(str(path)).engine == value
    else:
        with pytest.raises(LabError, match=error):
            load_scenario(str(path))


MESSAGES = st.sampled_from(["Connection refused (os error 111)", "timeout", "reset by peer", "?"])


@settings(max_examples=60, deadline=None)
@given(errors=st.dictionaries(MESSAGES, st.integers(0, 50)), room=st.integers(0, 120))
def test_the_window_takes_the_untimed_failures_its_arrivals_leave_room_for(
    errors: dict[str, int], room: int
) -> None:
    """However many failures oha only counted and however much room the window's arrivals
    leave, the window takes all of them or exactly the room, never more of a kind than there
    were."""
    taken = figures.in_window(errors, room)
    kinds: dict[str, int] = {}
    for message, count in errors.items():
        kinds[figures.kind_of(message)] = kinds.get(figures.kind_of(message), 0) + count
    assert sum(taken.values()) == min(room, sum(kinds.values()))
    assert all(0 < n <= kinds[k] for k, n in taken.items())
