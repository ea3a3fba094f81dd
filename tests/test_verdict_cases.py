"""The rules of issue 38, each on a row built from the case that showed it wrong (items 5 and 6):
hand-built records through the lab's own assessment, the live page through its own function, the
per-model sentence through `analysis.limiting`; a stall's seconds out of the throughput interval
through a written run. Real runs of a stall: tests/test_stalls.py."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from analysis import load
from analysis.judge import judge
from analysis.limiting import model_sentences
from analysis.metrics import point_table
from analysis.points import build
from lab.record import counted
from lab.record.flags import excluding, tail_excluding
from lab.record.step import Measured, Raised, Sampled, StepKey, StepRecord, amended, step_record
from lab.run.apparatus import host_busy
from lab.verdict.assess import assessed
from lab.verdict.capacity import Capacity
from lab.webui.liveflags import Live, flags
from tests.fixture_run import FixtureStep, build_run, closed_step

D_MS = 100.0


def capacity(requests: int = 1000, cores: float = 1.0) -> Capacity:
    return Capacity(requests, f"{requests} threads x 1 process", cores, D_MS, 64_000, host_cores=2)


def step(users: int, rps: float, cap: Capacity | None = None, **figures: Any) -> StepRecord:
    return closed_step(users, rps, cap or capacity(), **{"upstream_max_inflight": -1, **figures})


def compared(r: StepRecord) -> str:
    whole, tail = not excluding(r.evidence.flags), not tail_excluding(r.evidence.flags)
    return {(True, True): "yes", (True, False): "throughput", (False, False): "no"}[(whole, tail)]


def test_failures_never_lift_a_hidden_cap() -> None:
    """A cap that overflows into timeouts: 20 of 100 users' worth in flight by Little's law,
    p50 five delays, 30% timed out: excluded as the same cap without its timeouts is."""
    clean = step(100, 200, p50=500, cpu=10)
    failing = step(100, 200, p50=500, cpu=10, errors={"timeout": 900})
    assert clean.evidence.limited_by == failing.evidence.limited_by == "concurrency_cap"
    assert "capped_unexplained" in failing.evidence.flags and compared(failing) == "no"


def test_two_models_behind_one_stalled_upstream_are_judged_alike() -> None:
    """The upstream's own loop stalled 400 ms at its worst (5 ms on average, under the mean's
    limit): a lean model (idle CPU) and a heavy one (60%) behind it are both the upstream's, and
    the reason quotes the upstream's figures, never the client's p50 (173 ms)."""
    seen = {"upstream_max_inflight": 50, "upstream_served": 2900, "upstream_lag_max_ms": 400.0}
    lean = step(50, 290, p50=173, cpu=10, upstream_lag_ms=4.0, **seen)
    heavy = step(50, 290, p50=173, cpu=60, upstream_lag_ms=4.0, **seen)
    for r in (lean, heavy):
        assert (r.evidence.limited_by, r.evidence.limit_rule, compared(r)) == (
            "upstream",
            "upstream_slow",
            "no",
        )
        assert "400 ms" in r.evidence.limit_reason and "173" not in r.evidence.limit_reason, (
            r.evidence.limit_reason
        )


def test_the_client_latency_alone_never_blames_the_upstream() -> None:
    """Every request at an on-time upstream (its loop late 1 ms at most), p50 twice d, an idle
    server: whatever it was, the upstream's own figures do not say it was the upstream."""
    r = step(
        50,
        250,
        p50=200,
        cpu=10,
        upstream_max_inflight=50,
        upstream_served=2500,
        upstream_lag_ms=0.2,
        upstream_lag_max_ms=1.0,
    )
    assert r.evidence.limited_by != "upstream", r.evidence.limit_reason


def test_knobs_never_explain_a_plateau_above_them() -> None:
    """10 threads by the knobs, 30 requests in flight at the upstream of 50: not the knobs."""
    r = step(50, 300, capacity(10), p50=166, cpu=20, upstream_max_inflight=30, upstream_served=3000)
    assert "capped" not in r.evidence.flags and "capped_unexplained" in r.evidence.flags, (
        r.evidence.limit_reason
    )
    at_the_knob = step(
        50, 100, capacity(10), p50=500, cpu=20, upstream_max_inflight=10, upstream_served=1000
    )
    assert "capped" in at_the_knob.evidence.flags


def test_host_busy_leaves_remote_generators_cpu_out_of_this_hosts() -> None:
    """This host at 190%: the server 60%, the upstream 10%, a local generator 20% and a remote
    one 80% of its own machine's core. Others used 100% of this host's core: busy."""
    measured = Measured("", 10.0, 1000, 1000, client_cpu_pct=100.0)
    sampled = Sampled(server_cpu_pct=60.0, upstream_cpu_pct=10.0, host_cpu_pct=190.0)
    assert host_busy(measured, sampled, elsewhere_cpu_pct=80.0)
    assert not host_busy(measured, sampled)  # the old arithmetic: 20% others, not busy


@pytest.mark.parametrize("trial", [1, 2], ids=["run-1", "run-2"])
def test_a_starved_server_is_flagged_by_its_own_wait_whatever_the_host_sum(trial: int) -> None:
    """Two busy loops on the server's core, gunicorn-gevent at 200 users: its own run-queue wait
    (35% of the window) and its core busy with others (55% of a core beside its 45%) name the
    machine, whether or not the host-wide sum of other processes crossed `host_busy`'s line."""
    raised = (Raised("host_busy", "other processes used 60% of a core"),) if trial == 1 else ()
    r = step(
        200, 415, p50=480, cpu=45, raised=raised, server_wait_pct=35.0, server_cores_busy_pct=100.0
    )
    assert (r.evidence.limited_by, compared(r)) == ("host_busy", "no"), r.evidence.limit_reason


def test_an_app_refusing_most_requests_is_limited_by_its_failures_not_cpu() -> None:
    """A pool of 4 full, d = 100 ms: 38 answers a second in about d, 98% refused with a fast 503
    that kept the core at 97%: the failures are the limit (the CPU went on them), the answers'
    rate is about the pool's 4 in flight for d, and the tail is never compared."""
    r = step(200, 38, p50=101, cpu=97, errors={"http_5xx": 19_000})
    assert (r.evidence.limited_by, compared(r)) == ("errors", "throughput"), r.evidence.limit_reason
    assert "about 3.8 requests in flight" in r.evidence.limit_reason, r.evidence.limit_reason


def test_a_busy_event_loop_whose_requests_queue_is_its_cpu() -> None:
    """gunicorn-gevent at 100 users: 85% of its one core, p50 157 ms against d = 100 ms, 64% of
    the ideal, its processes waiting for a CPU 12% of the window: its core, not "cause not
    found"; behind nginx at 72% and p50 204 ms, the same."""
    bare = step(100, 640, p50=157, cpu=85, server_wait_pct=12.0)
    fronted = step(100, 490, p50=204, cpu=72)
    for r in (bare, fronted):
        assert (r.evidence.limited_by, r.evidence.limit_rule) == ("server_cpu", "server_busy"), (
            r.evidence.limit_reason
        )
    assert "waited for a CPU 12%" in bare.evidence.limit_reason


@pytest.mark.parametrize(
    ("record", "absent"),
    [
        (step(50, 2, p50=2000, cpu=5), re.compile(r"about 0 requests")),
        (
            amended(
                step(50, 400, p50=120, cpu=20),
                unanswered_share=0.05,
                errors={},
                flags=(),
            ),
            re.compile(r"\(\)"),
        ),
    ],
    ids=["fewer-than-one-at-once", "unfinished-without-error-kinds"],
)
def test_no_reason_says_nothing(record: StepRecord, absent: re.Pattern[str]) -> None:
    again = assessed(record, capacity())
    for reason in (
        again.evidence.limit_reason,
        *(a["reason"] for a in again.evidence.details.get("also_limited_by", [])),
    ):
        assert not absent.search(reason), reason


@pytest.mark.parametrize(
    ("failed", "tail"),
    [(100, False), (101, True)],
    ids=["exactly-1pct", "just-over-1pct"],
)
def test_failed_tail_and_unanswered_hides_agree(failed: int, tail: bool) -> None:
    measured = Measured("", 10.0, 10_000, 10_000 - failed, {"timeout": failed}, {"p50": 100.0})
    r = step_record("run", StepKey("m", "closed", 50, None, 1), measured)
    r = assessed(r, capacity())
    assert ("p99" in r.latency.unanswered_hides) == tail == ("failed_tail" in r.evidence.flags)
    assert counted.hides_p99(r.latency.unanswered_share) == tail


def test_the_model_sentence_skips_a_one_off_disturbance_below_its_scale() -> None:
    """Tracking the ideal at 1, 10 and 50 users, a busy machine for one step at 5, its CPU at
    100: the sentence says it scales to 50, then its CPU, never the busy machine."""

    def at(users: int, limit: str) -> StepRecord:
        r = step(users, 9.5 * users, p50=105, cpu=20)
        return amended(r, limited_by=limit, limit_reason=f"{limit} reason")

    records = [
        at(1, "none"),
        at(5, "host_busy"),
        at(10, "none"),
        at(50, "none"),
        at(100, "server_cpu"),
    ]
    (sentence,) = model_sentences(records)
    assert "scales to 50 users, then server CPU" in sentence and "busy" not in sentence, sentence


def test_the_live_page_names_a_late_upstream_before_any_model() -> None:
    """11 containers on 2 cores, 2 users per model at d = 100 ms: 10.6 of the ideal 20 req/s,
    p50 121 ms, server CPU 3.8%, the upstream's loop late by 30 ms on average and 402 ms at its
    worst: the upstream, for every model, and none "capped"."""
    upstream = {"loop_lag_mean_ms": 30.0, "loop_lag_max_ms": 402.0, "inflight": 16}
    shown = flags(Live(2, 10.6, 20.0, 3.8, 20.0, 1.0, 121.0, 0.0, upstream))
    assert "capped" not in shown and shown["lab_limited"].startswith("upstream"), shown


@pytest.mark.parametrize(
    ("cpu", "cores", "saturated"),
    [(95.0, 4.0, False), (380.0, 4.0, True), (95.0, 1.0, True)],
    ids=["one-core-of-four", "four-of-four", "one-of-one"],
)
def test_the_live_server_saturated_reads_the_servers_cores(
    cpu: float, cores: float, saturated: bool
) -> None:
    shown = flags(Live(50, 400.0, 500.0, cpu, 20.0, cores, 110.0))
    assert ("server_saturated" in shown) == saturated, shown


def test_a_stalls_seconds_stay_out_of_its_throughput_interval(tmp_path: Path) -> None:
    """Two seconds of a ten-second step with no answers: flagged `stalled` (never compared on
    p99), and its per-second throughput interval is the other seconds' spread, not widened by
    the outage into one that would tie it with anything."""
    rps = (500.0,) * 4 + (0.0, 0.0) + (500.0,) * 4
    run = build_run(tmp_path / "run", [FixtureStep("m", 50, rps_per_second=rps)])
    loaded = load(run)
    record = assessed(loaded.records[0], capacity())
    assert "stalled" in record.evidence.flags and record.evidence.outage_seconds == (4, 5)
    steps = run / "steps.jsonl"
    steps.write_text(record.to_json() + "\n")
    row = point_table(load(run)).iloc[0]
    assert row["rps_hi"] - row["rps_lo"] < 0.2 * row["rps"], (row["rps_lo"], row["rps_hi"])


def test_the_stall_rule_reads_answers_a_second_while_users_wait() -> None:
    quiet = step(1, 5, p50=200, cpu=5, timeseries={"rps": [5.0, 5.0, 0.0, 5.0, 5.0]})
    assert "stalled" not in quiet.evidence.flags  # 5 a second: a quiet second is chance
    own = [1.0] * 10
    own[3] = 900.0  # the generator's own loop stalled that second
    series = {"rps": [500.0] * 3 + [0.0] + [500.0] * 6, "lag_max_ms": own}
    by_generator = step(50, 450, p50=110, cpu=20, timeseries=series)
    assert "stalled" not in by_generator.evidence.flags


@pytest.mark.parametrize("quiet", [3, 6, 7], ids=["under-half", "over-half", "seven-tenths"])
def test_an_outage_longer_than_half_the_window_is_still_an_outage(quiet: int) -> None:
    """The median is taken over the seconds with answers: an outage of most of a ten-second
    window would otherwise be its own median (0) and no second would fall below it."""
    series = {"rps": [500.0] * (10 - quiet - 1) + [0.0] * quiet + [500.0]}
    record = step(50, 500 * (10 - quiet) / 10, p50=110, cpu=20, timeseries=series)
    assert "stalled" in record.evidence.flags, record.evidence.flags
    assert record.evidence.outage_seconds == tuple(range(9 - quiet, 9))


def test_a_stalled_step_is_never_best_on_p99() -> None:
    """Two models at 50 users: the stalled one answered faster between its outage seconds (p50
    105 ms against 115), so its answers' p99 is lower; it is still never best on p99."""
    outage = {"rps": [480.0] * 4 + [0.0, 0.0] + [480.0] * 4}
    stalled = replace(step(50, 384, p50=105, cpu=20, timeseries=outage), model="a")
    steady = replace(step(50, 430, p50=115, cpu=20), model="b")
    (ranking,) = judge(build([stalled, steady]))
    assert "stalled" in stalled.evidence.flags and ranking.best_p99 == ("b",), ranking
