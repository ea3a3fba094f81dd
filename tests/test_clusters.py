"""Requests held through a pause, told from the step's own latency distribution
(`lab.verdict.clusters`, `lab.verdict.pauses.held_pauses`).

Latency samples are generated here (a bulk about d, requests held about a pause's length P), put
into a real HdrHistogram and coarsened as the lab records a step (`hist.coarse_ms`); the expected
side is where the test put them (k requests at P, seconds chosen by the test), never the
function under test. The coarse bins are 5% wide, so a held request is told from the least pause
only one bin (5%) or more above it, and a pause's length within half a bin and d of the truth
(a held request waited the pause and up to one request's time).
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import asdict
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lab.record import hist
from lab.record.step import StepKey, StepRecord, amended, step_record
from lab.record.stepjson import from_json
from lab.verdict.assess import assessed
from lab.verdict.capacity import Capacity
from lab.verdict.clusters import cluster_of, held
from lab.verdict.pauses import least_pause_ms, pauses_of
from tests.fixture_run import window
from tests.reasoncheck import check

BIN = hist.COARSE_STEP


def spread(samples_ms: list[float]) -> tuple[tuple[float, int], ...]:
    h = hist.new_histogram()
    for ms in samples_ms:
        hist.record_ms(h, ms)
    return hist.coarse_ms(h)


def bulk(n: int, d: float, rng: random.Random) -> list[float]:
    """`n` answers between 0.8 d and 1.5 d: a step's typical latency and its spread."""
    return [d * rng.uniform(0.8, 1.5) for _ in range(n)]


class Bulk:
    """A generated step's bulk: `n` answers about d (`bulk`), drawn by a generator seeded with
    `seed`, which then draws the test's own slow answers."""

    def __init__(self, d: float, n: int, seed: int) -> None:
        self.d = d
        self.rng = random.Random(seed)
        self.samples = bulk(n, d, self.rng)
        self.shown = f"Bulk(d={d!r}, n={n}, seed={seed})"  # not its thousands of samples

    def __repr__(self) -> str:
        return self.shown


def bulks(least_n: int) -> st.SearchStrategy[Bulk]:
    """Bulks of `least_n` to 3000 answers about a d of 2 to 200 ms."""
    return st.builds(Bulk, st.floats(2, 200), st.integers(least_n, 3000), st.integers(0, 2**16))


@settings(max_examples=150, deadline=None)
@given(step=bulks(20), k=st.integers(1, 6), over=st.floats(1.1, 20))
def test_requests_held_far_above_the_bulk_are_a_cluster_of_their_count_and_length(
    step: Bulk, k: int, over: float
) -> None:
    d = step.d
    pause = over * least_pause_ms(d)
    slow = [pause + step.rng.uniform(0, d) for _ in range(k)]  # held from the pause's start
    c = cluster_of(spread(step.samples + slow), least_pause_ms(d))
    assert c is not None
    assert c.count == k
    assert pause / BIN**0.5 <= c.median_ms <= (pause + d) * BIN**0.5 * 1.001
    assert c.bulk_ms <= 1.5 * d * BIN * 1.001


@settings(max_examples=150, deadline=None)
@given(step=bulks(1), tail=st.lists(st.floats(0, 1), max_size=20))
def test_no_cluster_within_the_bulk_s_spread_or_below_the_least_pause(
    step: Bulk, tail: list[float]
) -> None:
    """Answers anywhere from 0.8 d to one bin under the least pause: never a cluster."""
    d, least = step.d, least_pause_ms(step.d)
    slow = [1.5 * d + x * (least / BIN**2 - 1.5 * d) for x in tail]
    assert cluster_of(spread(step.samples + slow), least) is None


def test_a_group_that_is_half_the_answers_is_the_bulk_not_a_cluster() -> None:
    assert cluster_of(spread([10.0] * 50 + [1000.0] * 50), 200) is None
    assert cluster_of(spread([10.0] * 51 + [1000.0] * 49), 200) is not None


def test_held_counts_the_answers_at_or_above_a_latency() -> None:
    s = spread([10.0] * 30 + [500.0] * 4 + [1000.0] * 2)
    assert held(s, 400) == 6 and held(s, 800) == 2 and held(s, 2000) == 0


D_MS = 100.0  # least pause 400 ms: at 1-4 users, 10-40 answers a second leave the bins thin


def held_step(
    users: int, samples: list[float], ends: list[int], seconds: int = 10, **more: Any
) -> StepRecord:
    """A closed-loop step of `users` whose answers' latencies are `samples`, the slowest of
    each second 1.2 d but in `ends` (the pause's length there: its held requests answered)."""
    pause = max(samples)
    maxes = [pause if i in ends else 1.2 * D_MS for i in range(seconds)]
    rps = len(samples) / seconds
    measured = window(
        rps,
        D_MS,
        seconds=seconds,
        answers_100ms=tuple([round(rps / 10)] * seconds * 10),
        answers_by_latency=spread(samples),
        timeseries={"max_ms": maxes, **more.pop("timeseries", {})},
        **more,
    )
    record = step_record("run", StepKey("m", "closed", users, None, 1), measured)
    cap = Capacity(1000, "1000 threads", 1.0, D_MS, 64_000, host_cores=2)
    check(record, cap)  # every number of its reasons is in their evidence
    return assessed(record, cap)


@settings(max_examples=80, deadline=None)
@given(
    users=st.integers(1, 4),
    ends=st.lists(st.integers(0, 4), min_size=1, max_size=3, unique=True),
    over=st.floats(1.1, 8),
    seed=st.integers(0, 2**16),
)
def test_pauses_too_thin_for_the_bins_are_found_from_the_requests_they_held(
    users: int, ends: list[int], over: float, seed: int
) -> None:
    """Each pause holds every user's request; pauses ending 2 s or more apart are told apart:
    their count, their length (within a bin and d) and their period, the test's own."""
    rng = random.Random(seed)
    pause = over * least_pause_ms(D_MS)
    first = math.ceil(pause / 1000)  # the first pause starts inside the window
    ends = sorted(first + 2 * e for e in ends)  # never adjacent
    slow = [pause + rng.uniform(0, D_MS) for _ in range(users * len(ends))]
    record = held_step(users, bulk(40 * users, D_MS, rng) + slow, ends, seconds=first + 10)
    found = pauses_of(record, D_MS)
    assert len(found) == len(ends), (found, record.evidence.limit_reason)
    for p in found:
        assert pause / BIN**0.5 - D_MS <= p.length_ms <= pause * BIN**0.5 + D_MS
    assert record.evidence.limited_by == "pause", record.evidence.limit_reason
    ev = record.evidence.details["paused"]
    assert ev["count"] == len(ends) and ev["held"] == len(slow)
    assert f"{len(slow)} request" in record.evidence.limit_reason
    gaps = sorted(b - a for a, b in zip(ends, ends[1:], strict=False))
    if gaps:  # one or two gaps: their median is their mean
        assert ev["period_s"] == pytest.approx(sum(gaps) / len(gaps), abs=0.11)
    else:
        assert ev["period_s"] is None


@settings(max_examples=80, deadline=None)
@given(
    users=st.integers(1, 4),
    over=st.floats(1.1, 8),
    lag_share=st.floats(0.5, 3),
    per_second=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_a_cluster_the_generator_s_own_lag_could_make_is_never_a_pause(
    users: int, over: float, lag_share: float, per_second: bool, seed: int
) -> None:
    """The generator's loop late by half the held requests' least wait or more, in the second they
    answered (or over the step, unknown per second): the generator paused, not the server."""
    rng = random.Random(seed)
    pause = over * least_pause_ms(D_MS)
    slow = [pause + rng.uniform(0, D_MS) for _ in range(users)]
    # half the least wait as the lab can know it: the lower edge of its coarse bin, up to one
    # bin's width (5%) above the wait itself
    lag = lag_share * min(slow) * hist.COARSE_STEP
    series = {"timeseries": {"lag_max_ms": [0.0] * 3 + [lag] + [0.0] * 6}} if per_second else {}
    record = held_step(
        users, bulk(40 * users, D_MS, rng) + slow, [3], generator_lag_ms={"max": lag}, **series
    )
    assert pauses_of(record, D_MS) == ()
    assert record.evidence.limited_by != "pause"


def test_one_slow_request_among_several_users_is_its_own_wait() -> None:
    rng = random.Random(1)
    assert pauses_of(held_step(3, bulk(120, D_MS, rng) + [1500.0], [4]), D_MS) == ()
    one = pauses_of(held_step(1, bulk(40, D_MS, rng) + [1500.0], [4]), D_MS)
    assert [p.seen for p in one] == ["held"]
    assert one[0].start_s == pytest.approx(4 + 0.5 - 1.5, abs=0.1 + D_MS / 1000)  # mid-second
    assert 1500 / BIN**0.5 - D_MS <= one[0].length_ms <= 1500 * BIN**0.5


def test_more_pauses_than_the_seconds_tell_apart_have_no_start() -> None:
    """Two pauses' held requests (2 users each) answered in one second: two pauses, when
    not told."""
    rng = random.Random(2)
    record = held_step(2, bulk(80, D_MS, rng) + [800.0] * 4, [5])
    found = pauses_of(record, D_MS)
    assert [p.start_s for p in found] == [None, None]
    assert record.evidence.details["paused"]["period_s"] is None
    assert " s of the " not in record.evidence.limit_reason


def bin_step(held_ms: float | None) -> StepRecord:
    """20 users, 30 answers per 100 ms with 500 ms of quiet, `held_ms` the 20 held requests'
    latency (None: the record has no answers by latency, an older one)."""
    rng = random.Random(3)
    ticks = [30] * 20 + [0] * 5 + [30] * 20
    samples = bulk(sum(ticks), 20.0, rng) + [held_ms or 0.0] * 20
    more = {"answers_by_latency": spread(samples)} if held_ms is not None else {}
    latency = {"p50": 20.0, "p99": 50.0, "max": 600.0}
    measured = window(
        300, 20.0, seconds=4.5, latency_ms=latency, answers_100ms=tuple(ticks), **more
    )
    record = step_record("run", StepKey("m", "closed", 20, None, 1), measured)
    return assessed(record, Capacity(1000, "1000 threads", 1.0, 20.0, 64_000, host_cores=2))


def test_a_bin_found_pause_counts_where_the_requests_were_held_through_it() -> None:
    assert [p.length_ms for p in pauses_of(bin_step(520.0), 20.0)] == [500.0]
    assert pauses_of(bin_step(100.0), 20.0) == ()  # nobody waited half of it
    assert len(pauses_of(bin_step(None), 20.0)) == 1  # an older record: the slowest request
    assert "seen per 100 ms" in bin_step(520.0).evidence.limit_reason


def test_the_answers_by_latency_survive_the_record_s_json() -> None:
    record = held_step(1, [100.0] * 30 + [900.0], [2])
    again = from_json(json.loads(json.dumps(asdict(record))))
    assert again.load.answers_by_latency == record.load.answers_by_latency
    assert amended(again, answers_by_latency=()) != record


@settings(max_examples=80, deadline=None)
@given(
    users=st.integers(2, 60),
    quiet=st.integers(3, 15),
    held_n=st.integers(0, 60),
    seed=st.integers(0, 2**16),
)
def test_a_bin_found_pause_counts_where_half_the_users_requests_waited_half_of_it(
    users: int, quiet: int, held_n: int, seed: int
) -> None:
    """30 answers per 100 ms around `quiet` empty bins (d 20 ms): a pause where the requests
    that waited through it (at its length) are half the users or more, none where fewer."""
    rng = random.Random(seed)
    ticks = [30] * 20 + [0] * quiet + [30] * 20
    samples = bulk(sum(ticks), 20.0, rng) + [
        quiet * 100 + rng.uniform(0, 20) for _ in range(held_n)
    ]
    measured = window(
        300,
        20.0,
        seconds=len(ticks) / 10,
        answers_100ms=tuple(ticks),
        answers_by_latency=spread(samples),
    )
    record = step_record("run", StepKey("m", "closed", users, None, 1), measured)
    found = pauses_of(record, 20.0)
    assert len(found) == (1 if 2 * held_n >= users else 0), (found, held_n, users)
