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
