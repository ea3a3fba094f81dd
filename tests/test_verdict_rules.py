"""Verdicts that stay right on big machines and on odd routes, on hand-built records: an idle
upstream counter is no cap, a server at its CPU is no cap, a saturated apparatus beside a full
server names both, and one that spent its CPU on a connection per request, or on a host with no
core left, is not told to add generators; efficiency never exceeds 1 (real runs:
tests/test_verdict_runs.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from analysis import load
from analysis.metrics import point_table
from analysis.summary import generators_advice
from lab.record.step import Raised, StepRecord
from lab.verdict.capacity import Capacity
from lab.verdict.facts import upstream_inflight
from tests.fixture_run import FixtureStep, build_run, closed_step

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
    inflight: int = 0,
    served: int = -1,
    cap: Capacity | None = None,
    **figures: Any,
) -> StepRecord:
    """`closed_step` with the upstream's counters as given (in flight at most, requests served)."""
    more = {"upstream_max_inflight": inflight, "upstream_served": served}
    return closed_step(users, rps, cap or capacity(), **more, **figures)


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
    assert not CAPS & set(r.evidence.flags), r.evidence.limit_reason
    assert r.evidence.limited_by == "none"


def test_a_queue_on_a_route_without_upstream_is_still_inferred_from_outside() -> None:
    """The same route with a pool of 5 inside the app: Little's law sees 5 in flight of 50."""
    r = step(50, 500, p50=100, cpu=10, inflight=0, served=0)
    assert "capped_unexplained" in r.evidence.flags
    assert r.evidence.details["capped_unexplained"]["seen_by"].startswith("Little's law")
    assert r.evidence.details["capped_unexplained"]["ceiling"] == 5


def test_the_counter_counts_where_the_load_went_through_the_upstream() -> None:
    r = step(50, 200, p50=250, cpu=10, inflight=10, served=2000)
    assert upstream_inflight(r) == 10
    assert "capped_unexplained" in r.evidence.flags
    assert r.evidence.details["capped_unexplained"]["seen_by"] == "the upstream's in-flight counter"


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
    assert bool(CAPS & set(r.evidence.flags)) == capped, r.evidence.limit_reason
    if not capped:
        assert r.evidence.limited_by == "server_cpu" and not r.evidence.excluded_by


SATURATED = Raised(
    "apparatus_saturated",
    {"core_busy_pct": 97.0, "waited_for_cpu_pct": 12.0, "advice": "more generators"},
)


@pytest.mark.parametrize(
    "raised",
    [(SATURATED,), (Raised("client_saturated", "generator CPU 98% of its core"),)],
    ids=["apparatus-saturated", "client-saturated"],
)
def test_a_full_server_beside_a_saturated_generator_names_both(raised: tuple[Raised]) -> None:
    """gunicorn-asyncio, 8 processes at 779% of 8 cores, every generator at 96-98%: the server
    is named, the generators too, and "use more generators" (which cannot help) is not said; the
    figure is the lower of two limits, so the step is the lab's too and never best."""
    cap = capacity(requests=8000, processes=8, cores=8.0)
    r = step(800, 20_000, p50=40, cpu=779, raised=raised, cap=cap, client_cpu=97)
    assert r.evidence.limited_by == "server_cpu" and "lab_limited" in r.evidence.excluded_by
    assert "8 cores at 779%" in r.evidence.limit_reason and "apparatus" in r.evidence.limit_reason
    assert (
        "both" in r.evidence.limit_reason and "use more generators" not in r.evidence.limit_reason
    )


def test_a_saturated_generator_beside_an_idle_server_is_the_apparatus() -> None:
    r = step(800, 20_000, p50=40, cpu=200, raised=(SATURATED,), cap=capacity(8000, 8, 8.0))
    assert (
        r.evidence.limited_by == "apparatus"
        and "server" not in r.evidence.limit_reason.split(":")[0]
    )


@pytest.mark.parametrize(
    ("rps", "server", "dbs", "limit"),
    [
        (600, 40.0, {"postgres": 92.0}, "database"),
        (600, 40.0, {"redis": 75.0}, "database"),
        (600, 40.0, {"postgres": 30.0, "redis": 88.0}, "database"),
        (600, 40.0, {"postgres": 40.0}, "capped_unexplained"),
        (600, 95.0, {"postgres": 92.0}, "server_cpu"),
        (990, 40.0, {"postgres": 92.0}, "none"),
    ],
    ids=["busy-postgres", "busy-redis", "the-busier-one", "quiet-db", "server-full", "at-ideal"],
)
def test_an_apps_busy_database_is_named_with_its_cost_per_request(
    rps: float, server: float, dbs: dict[str, float], limit: str
) -> None:
    """10 users at d = 10 ms (ideal 1,000 req/s) answered at 600 with requests waiting: where a
    database the lab started for the app was busy, it is named with its CPU per request beside
    the server's; a full server is named first, and at the ideal nothing limits."""
    r = step(10, rps, p50=16, cpu=server, database_cpu_pct=dbs)
    named = {"capped_unexplained": "concurrency_cap"}.get(limit, limit)
    assert r.evidence.limited_by == named, r.evidence.limit_reason
    kind, pct = max(dbs.items(), key=lambda kv: kv[1])
    per_request = {k: v / 100 * 1000 / rps for k, v in dbs.items()}  # a core's ms per request
    assert r.resources.database_cpu_ms_per_req == pytest.approx(per_request, abs=0.002)
    if limit == "database":
        name = {"postgres": "PostgreSQL", "redis": "Redis"}[kind]
        assert r.evidence.limit_reason.startswith(f"the app's {name} used {pct:.0f}% of a core")
        assert f"(the server {server / 100 * 1000 / rps:.2f} ms)" in r.evidence.limit_reason


def capacity16(processes: int = 8) -> Capacity:
    """uwsgi-threads, 8 processes x 800 threads, on a 16-core machine."""
    return Capacity(
        800 * processes,
        f"800 threads x {processes} processes",
        cores=float(processes),
        delay_ms=D_MS,
        memory_mb=64_000,
        processes=processes,
        host_cores=16,
    )


def closing_step(connections: int, host_pct: float = 900.0, cpu: float = 430.0) -> StepRecord:
    """800 users on /sleep?ms=10 at 1,457 req/s: 7 generators at 99.5%, softirq 398%."""
    raised = (Raised("client_saturated", "7 generators at 99.5% of a core each"),)
    return step(
        800,
        1457,
        p50=540,
        cpu=cpu,
        raised=raised,
        cap=capacity16(),
        client_cpu=696,
        server_connections=connections,
        server_time_wait=connections,
        host_softirq_pct=398,
        host_cpu_pct=host_pct,
    )


@pytest.mark.parametrize(
    ("connections", "host_pct", "limit", "said"),
    [
        (14_570, 900.0, "connections", "closes each connection after its response"),
        (14_570, 1560.0, "connections", "16 cores were all busy"),
        (0, 900.0, "apparatus", "use more generators"),
        (0, 1560.0, "host_cpu", "cannot help"),
    ],
    ids=["closing", "closing-full-host", "keep-alive", "keep-alive-full-host"],
)
def test_what_the_generators_cpu_went_to_is_named(
    connections: int, host_pct: float, limit: str, said: str
) -> None:
    r = closing_step(connections, host_pct)
    assert r.evidence.limited_by == limit and said in r.evidence.limit_reason, (
        r.evidence.limit_reason
    )
    if limit != "apparatus":
        assert "use more generators" not in r.evidence.limit_reason
        assert generators_advice([r]) == ""
    else:
        assert "--generators" in generators_advice([r])
    if connections:
        assert "1.00 TCP connections closed per request" in r.evidence.limit_reason
        assert "14,570 sockets in TIME_WAIT" in r.evidence.limit_reason


def test_a_full_server_takes_precedence_over_a_connection_per_request() -> None:
    r = closing_step(14_570, cpu=790)
    assert r.evidence.limited_by == "server_cpu" and "both" in r.evidence.limit_reason
    assert generators_advice([r]) == ""


def test_the_apparatus_evidence_gives_no_advice_that_cannot_help() -> None:
    ev = {"core_busy_pct": 99.0, "waited_for_cpu_pct": 40.0, "advice": "more generators"}
    raised = (Raised("apparatus_saturated", ev),)
    r = step(800, 20_000, p50=40, cpu=779, raised=raised, cap=capacity(8000, 8, 8.0))
    assert r.evidence.details["apparatus_saturated"]["advice"] == r.evidence.limit_reason
    assert "more generators alone cannot" in r.evidence.limit_reason


def _multi_process_run(tmp_path: Path, cpus: int, fair_cpu: float) -> dict[int, dict]:
    """uwsgi-threads, 4 processes, d = 100 ms: 200 users fair, 800 and 1,600 users excluded (the
    generators saturated) at more throughput, the server at 525% of 4 processes (kernel and C
    threads beside the GIL), as in the realistic run on 16 cores."""
    steps = [
        FixtureStep("m", 200, 1, (1533.0,) * 3, server_cpu_pct=fair_cpu),
        *(
            FixtureStep("m", c, 1, (rps,) * 3, server_cpu_pct=525.0, flags=("apparatus_saturated",))
            for c, rps in ((800, 1625.0), (1600, 1630.0))
        ),
    ]
    run = build_run(tmp_path, steps, delay_ms=100.0, processes=4, cpus=cpus)
    table = point_table(load(run))
    return {int(r["concurrency"]): r for r in table.to_dict("records")}


@pytest.mark.parametrize(
    ("cpus", "fair_cpu"),
    [(16, 430.0), (16, 600.0), (4, 430.0), (2, 180.0)],
    ids=["16-cores", "16-cores-costly-fair-point", "pinned-to-4", "2-cores"],
)
def test_efficiency_never_exceeds_one(tmp_path: Path, cpus: int, fair_cpu: float) -> None:
    rows = _multi_process_run(tmp_path, cpus, fair_cpu)
    for c, row in rows.items():
        assert 0 < row["efficiency"] <= 1.0, (c, row["efficiency"], row["ceiling_rps"])
        assert row["ceiling_rps"] >= 1630.0  # what was measured was possible


def test_efficiency_a_hair_over_the_ideal_is_one(tmp_path: Path) -> None:
    steps = [FixtureStep("m", 10, 1, (101.0,) * 3, server_cpu_pct=20.0)]  # ideal 10 / 0.1 s
    table = point_table(load(build_run(tmp_path, steps, delay_ms=100.0)))
    assert table["efficiency"].iloc[0] == 1.0
