"""Verdicts that stay right on big machines and on odd routes, on hand-built records: an idle
upstream counter is no cap, a server at its CPU is no cap, and a saturated apparatus beside a full
server names both (real runs: tests/test_verdict_runs.py)."""

from __future__ import annotations

import pytest

from lab.record.step import Measured, Raised, Sampled, StepKey, StepRecord, step_record
from lab.run.limits import Capacity, assessed, upstream_inflight

D_MS = 10.0


def capacity(requests: int = 1000, processes: int = 1, cores: float = 1.0) -> Capacity:
    return Capacity(
        requests,
        f"{requests} threads x {processes} processes",
        cores=cores,
        delay_ms=D_MS,
        memory_mb=64_000,
        processes=processes,
    )


def step(
    users: int,
    rps: float,
    *,
    p50: float,
    cpu: float,
    inflight: int = 0,
    served: int = -1,
    raised: tuple[Raised, ...] = (),
    cap: Capacity | None = None,
    client_cpu: float = 20.0,
) -> StepRecord:
    """A 10 s closed-loop step: `rps` answers a second, the upstream's counters as given."""
    measured = Measured(
        started_at="2026-01-01T00:00:00+00:00",
        duration_s=10.0,
        requests=round(rps * 10),
        ok=round(rps * 10),
        latency_ms={"p50": p50, "p99": 2 * p50},
        client_cpu_pct=client_cpu,
    )
    sampled = Sampled(
        server_cpu_pct=cpu,
        server_rss_mb=60,
        upstream_max_inflight=inflight,
        upstream_served=served,
    )
    key = StepKey("m", "closed", users, None, 1)
    return assessed(step_record("run", key, measured, sampled, raised), cap or capacity())


CAPS = {"capped", "capped_unexplained"}


@pytest.mark.parametrize(
    ("inflight", "served"),
    [(0, -1), (0, 0), (3, 12), (-1, -1)],
    ids=["counter-0-served-unknown", "counter-0-served-0", "a-few-stray-requests", "unknown"],
)
def test_an_upstream_the_load_does_not_pass_is_no_evidence(inflight: int, served: int) -> None:
    """/sleep at 50 users, 10 ms, every request answered in about 10 ms by an idle server: the
    upstream saw nothing (or a stray few), so nothing is capped; the outside inference decides."""
    r = step(50, 4900, p50=10.2, cpu=30, inflight=inflight, served=served)
    assert upstream_inflight(r) == -1
    assert not CAPS & set(r.flags), r.limit_reason
    assert r.limited_by == "none"


def test_a_queue_on_a_route_without_upstream_is_still_inferred_from_outside() -> None:
    """The same route with a pool of 5 inside the app: Little's law sees 5 in flight of 50."""
    r = step(50, 500, p50=100, cpu=10, inflight=0, served=0)
    assert "capped_unexplained" in r.flags
    assert r.evidence["capped_unexplained"]["seen_by"].startswith("Little's law")
    assert r.evidence["capped_unexplained"]["ceiling"] == 5


def test_the_counter_counts_where_the_load_went_through_the_upstream() -> None:
    r = step(50, 200, p50=250, cpu=10, inflight=10, served=2000)
    assert upstream_inflight(r) == 10
    assert "capped_unexplained" in r.flags
    assert r.evidence["capped_unexplained"]["seen_by"] == "the upstream's in-flight counter"


@pytest.mark.parametrize(
    ("cpu", "cores", "processes", "capped"),
    [(139.0, 1.0, 1, False), (95.0, 1.0, 1, False), (760.0, 8.0, 8, False), (30.0, 1.0, 1, True)],
    ids=["one-process-139pct", "one-process-95pct", "eight-processes-760pct", "idle-server"],
)
def test_a_server_at_its_cpu_is_never_capped(
    cpu: float, cores: float, processes: int, capped: bool
) -> None:
    """uwsgi-threads at 200 users on a 16-core machine: one GIL-bound process at 139% is at the
    CPU it can use, so the 158 of 200 in flight at the upstream is the CPU's queue, not a cap."""
    cap = capacity(requests=1000 * processes, processes=processes, cores=cores)
    r = step(200, 3000, p50=60, cpu=cpu, inflight=158, served=30_000, cap=cap)
    assert bool(CAPS & set(r.flags)) == capped, r.limit_reason
    if not capped:
        assert r.limited_by == "server_cpu" and not r.excluded_by
