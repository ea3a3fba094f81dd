"""The verdict's rule table on the cases where the old accretion of rules contradicted itself
(issue 32), each with the verdict a careful engineer would give, and its invariants as
properties: exactly one primary limit, a step compared only where its primary rule allows it,
a disturbance never read as the app's cap. Hand-built records, 10 ms service time, one core."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lab.record.flags import excluding, tail_excluding
from lab.record.step import Raised, StepRecord
from lab.record.thresholds import T
from lab.verdict.assess import assessed
from lab.verdict.capacity import Capacity
from lab.verdict.facts import facts_of
from lab.verdict.table import RULES
from lab.webui.liveflags import Live, flags
from tests.fixture_run import closed_step

D_MS = 10.0
CAPS = {"capped", "capped_unexplained"}


def capacity(requests: int = 1000, host_cores: int = 2) -> Capacity:
    return Capacity(
        requests, f"{requests} threads x 1 process", 1.0, D_MS, 64_000, host_cores=host_cores
    )


def step(users: int, rps: float, **figures: Any) -> StepRecord:
    """`closed_step` on one core of 1000 threads, the upstream's counter unknown unless given."""
    return closed_step(users, rps, capacity(), **{"upstream_max_inflight": -1, **figures})


GEN_FULL = Raised("client_saturated", {"client_cpu_pct": 97.0, "generators_needed": 2})
LAG = Raised("generator_lag", {"lag_p99_ms": 40.0})
SHORT_LAG = Raised("generator_lag", {"lag_p99_ms": 4.0})
HOST = Raised("host_busy", "other processes used 80% of a core")
LATE = Raised("apparatus_saturated", {"causes": ["late"], "upstream_loop_lag_ms": 8.0})
# The figures of a case that another case repeats with one more figure (its point):
UPSTREAM_LATE: dict[str, Any] = {"p50": 20, "cpu": 30, "raised": (LATE,), "upstream_lag_ms": 8.0}
HOST_WAITED: dict[str, Any] = {"p50": 25, "cpu": 45, "raised": (HOST,), "server_wait_pct": 35.0}


@pytest.mark.parametrize(
    ("record", "limit", "compared", "not_flags"),
    [
        # 1: the generator's own queue is not the app's pool
        (
            step(200, 2500, p50=80, cpu=40, raised=(GEN_FULL,), client_cpu=97),
            "apparatus",
            "no",
            CAPS,
        ),
        # 2: one verdict with the counter or without it: a busy server is no hidden cap; its
        # core that busy made requests queue for it (issue 38: not "cause not found")
        (
            step(50, 2500, p50=20, cpu=85, upstream_max_inflight=25, upstream_served=25000),
            "server_cpu",
            "yes",
            CAPS,
        ),
        (step(50, 2500, p50=20, cpu=85), "server_cpu", "yes", CAPS),
        # 3: the upstream's loop was late: the upstream's advice, whatever the server closes
        (step(50, 2500, **UPSTREAM_LATE), "upstream", "no", CAPS),
        (step(50, 2500, **UPSTREAM_LATE, server_connections=25000), "upstream", "no", CAPS),
        # 4: other processes took the server's core: the machine, not the app
        (step(50, 2000, **HOST_WAITED), "host_busy", "no", CAPS),
        # ... other processes busy, but nothing of the run waited: no cap, no blame, not found
        (step(50, 2000, p50=25, cpu=45, raised=(HOST,)), "unknown", "yes", CAPS),
        # ... a server that waited on its own threads, nothing else busy: its own queue, as usual
        (step(50, 2000, p50=25, cpu=45, server_wait_pct=40.0), "concurrency_cap", "no", set()),
        (
            step(50, 2000, **HOST_WAITED, upstream_max_inflight=50, upstream_served=20000),
            "host_busy",
            "no",
            CAPS,
        ),
        # 5: a lagging generator below the ideal: the generator, not a cap
        (step(50, 2000, p50=25, cpu=30, raised=(LAG,)), "apparatus", "no", CAPS),
        # ... a short lag (under d) below the ideal moves the tail only: no cap, cause not found
        (step(50, 2000, p50=25, cpu=30, raised=(SHORT_LAG,)), "unknown", "throughput", CAPS),
        # ... and tracking the ideal: throughput counts, the tail does not
        (step(50, 4900, p50=10.2, cpu=30, raised=(LAG,)), "none", "throughput", CAPS),
        # 6: a saturated generator alone is never best
        (
            step(50, 4000, p50=12, cpu=40, raised=(GEN_FULL,), client_cpu=97),
            "apparatus",
            "no",
            set(),
        ),
        # 7: the CPU that caused the timeouts is named; the tail is not compared
        (
            step(50, 4000, p50=12, cpu=97, errors={"timeout": 2000}),
            "server_cpu",
            "throughput",
            CAPS,
        ),
        # 8: an app that sheds load behind a queue: its hidden pool, never "serialized", and its
        # failures never lift the cap's exclusion (issue 38)
        (
            step(50, 37.5, p50=100, cpu=5, errors={"http_5xx": 45496}),
            "concurrency_cap",
            "no",
            {"capped"},
        ),
    ],
    ids=[
        "1-saturated-generator",
        "2-busy-server-counter",
        "2-busy-server-inferred",
        "3-upstream-late",
        "3-upstream-late-closing",
        "4-host-busy",
        "4-host-busy-nothing-waited",
        "4-server-waited-on-itself",
        "4-host-busy-counter-full",
        "5-generator-lag-below-ideal",
        "5-short-lag-below-ideal",
        "5-generator-lag-at-ideal",
        "6-client-saturated-alone",
        "7-cpu-and-timeouts",
        "8-shedding-app",
    ],
)
def test_the_cases_that_contradicted(
    record: StepRecord, limit: str, compared: str, not_flags: set[str]
) -> None:
    assert record.evidence.limited_by == limit, record.evidence.limit_reason
    assert not not_flags & set(record.evidence.flags), record.evidence.flags
    whole = not excluding(record.evidence.flags)
    tail = not tail_excluding(record.evidence.flags)
    assert (whole, tail) == {
        "yes": (True, True),
        "throughput": (True, False),
        "no": (False, False),
    }[compared], (record.evidence.flags, record.evidence.limit_reason)


def test_the_secondary_evidence_is_kept() -> None:
    r = step(50, 4000, p50=12, cpu=97, errors={"timeout": 2000})
    assert r.evidence.also_limited_by == ("errors",)
    (also,) = r.evidence.details["also_limited_by"]
    assert also["rule"] == "errors" and "timeout 2000" in also["reason"]


def test_the_upstream_late_advice_is_the_upstreams() -> None:
    r = step(50, 2500, **UPSTREAM_LATE)
    assert "give the upstream more processes" in r.evidence.limit_reason


def test_assessing_twice_gives_the_same_verdict() -> None:
    r = step(200, 2500, p50=80, cpu=40, raised=(GEN_FULL,), client_cpu=97)
    again = assessed(r, capacity())
    assert (again.evidence.flags, again.evidence.limited_by, again.evidence.limit_reason) == (
        r.evidence.flags,
        r.evidence.limited_by,
        r.evidence.limit_reason,
    )


OBSERVED = ["client_saturated", "generator_lag", "host_busy", "apparatus_saturated", "serialized"]


@dataclass(frozen=True)
class Load:
    """A generated step's load: its users, the share of the ideal throughput they got, its p50
    in delays and the server's CPU (%)."""

    users: int
    share: float
    p50_delays: float
    cpu: float

    @property
    def rps(self) -> float:
        return self.share * self.users / (D_MS / 1000)

    def step(self, **figures: Any) -> StepRecord:
        """`step` at this load, with more `figures`."""
        return step(self.users, self.rps, p50=self.p50_delays * D_MS, cpu=self.cpu, **figures)


def loads(least_users: int = 1, least_share: float = 0.0) -> st.SearchStrategy[Load]:
    """Loads of `least_users` to 400 users at `least_share` to 1.2 of the ideal, a p50 of 0.5
    to 20 delays and a server's CPU of 0-110%: the space every generated step here is drawn from."""
    users, share = st.integers(least_users, 400), st.floats(least_share, 1.2)
    return st.builds(Load, users, share, st.floats(0.5, 20.0), st.floats(0.0, 110.0))


@settings(max_examples=300, deadline=None)
@given(
    load=loads(),
    inflight=st.integers(-1, 400),
    failed=st.integers(0, 500),
    flags=st.lists(st.sampled_from(OBSERVED), unique=True),
    wait=st.floats(0.0, 60.0),
    lag=st.floats(-1.0, 20.0),
)
def test_the_table_invariants(
    load: Load, inflight: int, failed: int, flags: list[str], wait: float, lag: float
) -> None:
    r = load.step(
        raised=tuple(Raised(f, {}) for f in flags),
        errors={"timeout": failed} if failed else None,
        upstream_max_inflight=inflight,
        upstream_served=round(load.rps * 10),
        server_wait_pct=wait,
        upstream_lag_ms=lag,
    )
    facts = facts_of(r, capacity())
    (named,) = [rule for rule in RULES if rule.name == r.evidence.limit_rule]
    # the record names one rule of the table, which fires on the step's own facts, and its limit
    assert named.check(facts) and r.evidence.limited_by == named.limit, r.evidence.limit_reason
    # nothing limits a step only where its answers track the ideal
    assert r.evidence.limited_by != "none" or load.share >= T.tracks_ideal_share, (
        r.evidence.limit_reason
    )
    # compared (on anything) only where the primary rule allows it
    assert bool(excluding(r.evidence.flags)) == (named.effect == "excluded"), (
        r.evidence.flags,
        named.name,
    )
    # a disturbance never becomes the app's cap
    if facts_of(r, capacity()).disturbances - {"apparatus_cpu_wait"}:
        assert not CAPS & set(r.evidence.flags), (r.evidence.flags, r.evidence.limit_reason)


@pytest.mark.parametrize(
    ("record", "limit", "compared"),
    [
        # a cap the upstream's counter saw stays the limit when requests also failed
        (
            step(50, 1000, p50=50, cpu=20, upstream_max_inflight=10, upstream_served=10000),
            "concurrency_cap",
            "no",
        ),
        (
            step(
                50,
                1000,
                p50=50,
                cpu=20,
                upstream_max_inflight=10,
                upstream_served=10000,
                errors={"timeout": 200},
            ),
            "concurrency_cap",
            "no",
        ),
        # ... and from outside: a cap that overflows into timeouts stays excluded (issue 38)
        (step(50, 1000, p50=50, cpu=20, errors={"timeout": 200}), "concurrency_cap", "no"),
        # both full: the lower of two limits, and nothing tells which: never best
        (
            step(50, 3000, p50=16, cpu=97, raised=(GEN_FULL,), client_cpu=97),
            "server_cpu",
            "no",
        ),
    ],
    ids=[
        "counter-cap",
        "counter-cap-with-timeouts",
        "inferred-cap-with-timeouts",
        "both-full-client-saturated",
    ],
)
def test_failures_never_make_a_step_more_comparable(
    record: StepRecord, limit: str, compared: str
) -> None:
    assert record.evidence.limited_by == limit, record.evidence.limit_reason
    whole, tail = not excluding(record.evidence.flags), not tail_excluding(record.evidence.flags)
    assert (whole, tail) == {"throughput": (True, False), "no": (False, False)}[compared]


@settings(max_examples=300, deadline=None)
@given(
    load=loads(least_users=2, least_share=0.05),
    seen=st.floats(0.0, 1.0) | st.none(),
    failed=st.integers(1, 50_000),
)
def test_failed_requests_never_lift_an_exclusion(
    load: Load, seen: float | None, failed: int
) -> None:
    """With the upstream's counter or without it (an in-flight count from outside), adding
    failed requests to a step never makes it more comparable than the same step without them."""
    figures: dict[str, Any] = {}
    if seen is not None:  # 0: the load did not pass it
        figures |= {
            "upstream_max_inflight": max(1, round(seen * load.users)),
            "upstream_served": round(load.rps * 10),
        }
    clean = load.step(**figures)
    failing = load.step(errors={"timeout": failed}, **figures)
    assert excluding(failing.evidence.flags) or not excluding(clean.evidence.flags), (
        failing.evidence.limit_reason
    )
    assert tail_excluding(failing.evidence.flags) or not tail_excluding(clean.evidence.flags)


@pytest.mark.parametrize(
    ("live", "shown"),
    [
        (Live(200, 2500, 20000, 40, 97), {"client_saturated", "lab_limited"}),
        (Live(200, 2500, 20000, 40, 20), {"capped"}),
        (Live(50, 4000, 5000, 97, 97), {"server_saturated", "client_saturated", "lab_limited"}),
    ],
    ids=["1-saturated-generator-live", "cap-live", "both-full-live"],
)
def test_the_live_flags_read_a_saturated_generator_as_the_verdict_does(
    live: Live, shown: set[str]
) -> None:
    assert set(flags(live)) == shown


@pytest.mark.parametrize(
    ("rps", "p50", "closed", "limit"),
    [
        (2000, 25.0, 5000, "front"),  # a new server connection for 25% of requests, below ideal
        (2000, 25.0, 0, "concurrency_cap"),  # the pool held: read as the bare model would be
        (4900, 10.2, 24500, "none"),  # churning but tracking the ideal: the pool limited nothing
    ],
    ids=["pool-full-below-ideal", "pool-held", "pool-full-at-ideal"],
)
def test_a_full_keepalive_pool_behind_nginx_names_the_front(
    rps: float, p50: float, closed: int, limit: str
) -> None:
    record = step(50, rps, p50=p50, cpu=35, front_cpu_pct=10.0, front_server_connections=closed)
    assert record.evidence.limited_by == limit, record.evidence.limit_reason
    if limit == "front":
        assert "keepalive pool was full" in record.evidence.limit_reason


def test_behind_nginx_the_cores_it_shares_with_the_server_count_as_the_servers() -> None:
    """The server at 85% and nginx at 13% of its one core: the deployment's core was full, so
    the step is server_cpu (both named), never a cause not found."""
    record = step(200, 1400, p50=142, cpu=85, front_cpu_pct=13.0)
    assert record.evidence.limited_by == "server_cpu", record.evidence.limit_reason
    assert "the server 85%, nginx in front 13%" in record.evidence.limit_reason
