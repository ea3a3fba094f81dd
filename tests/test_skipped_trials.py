"""A skipped step is no trial: whatever skipped records join a sweep (a third trial whose
preflight failed, a model skipped at a level it never reached), every point's figures, its count
of trials, the point table's row and the closing line's 'smallest change' stay those of the
steps that measured something; the skipped steps add only their flags, so the point says why."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from analysis.metrics import point_table
from analysis.points import build, point
from lab.record.step import Measured, Raised, StepKey, StepRecord, step_record
from lab.verdict.power import smallest_seen
from tests.fixture_run import window
from tests.helpers import run_of, sweep

SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
WHY = "preflight_failed"


def skipped(model: str, users: int, trial: int) -> StepRecord:
    """What the sweep writes for a step it could not measure (lab.run.sweep.record_skipped)."""
    key = StepKey(model, "closed", users, None, trial)
    raised = (Raised(WHY, {"message": "wrong answer from /io"}),)
    return step_record(
        "run",
        key,
        Measured(started_at="2026-01-01T00:00:00+00:00"),
        raised=raised,
        status="skipped",
    )


@st.composite
def with_skipped(draw: st.DrawFn) -> tuple[list[StepRecord], list[StepRecord]]:
    """A generated sweep, and skipped records for some of its points (a trial after its last)
    and for a point it never measured."""
    records = draw(sweep())
    assume(records)
    last: dict[tuple[str, int], int] = {}
    for r in records:
        last[(r.model, r.users or 0)] = max(last.get((r.model, r.users or 0), 0), r.trial)
    chosen = draw(st.lists(st.sampled_from(sorted(last)), unique=True))
    extra = [skipped(m, u, last[(m, u)] + 1) for m, u in chosen]
    extra.append(skipped("never-measured", 7, 1))
    return records, extra


def same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


@SETTINGS
@given(with_skipped())
def test_skipped_steps_change_no_figure_only_the_flags(
    case: tuple[list[StepRecord], list[StepRecord]],
) -> None:
    records, extra = case
    before, after = build(records), build([*records, *extra])
    for key, p in before.items():
        q = after[key]
        assert same(q.rps, p.rps) and same(q.p99_ms, p.p99_ms) and q.trials == p.trials
        assert q.throughput.trials == p.throughput.trials
        if q.skipped:
            assert WHY in q.flags and WHY in q.excluded_by
            assert WHY in q.throughput.unfit and WHY in q.latency.unfit
    never = after[("never-measured", "closed", 7)]
    assert never.trials == 0 and math.isnan(never.rps) and WHY in never.excluded_by
    assert never.p99_beyond == 0.0  # no trial: no request beyond its p99
    assert never.label == "7 users"
    assert smallest_seen([*records, *extra]) == smallest_seen(records)


@SETTINGS
@given(with_skipped())
def test_the_point_table_counts_and_averages_only_trials(
    tmp_path_factory: pytest.TempPathFactory,
    case: tuple[list[StepRecord], list[StepRecord]],
) -> None:
    records, extra = case
    base = tmp_path_factory.mktemp("skips")
    plain = point_table(run_of(records, base / "a")).set_index(["model", "concurrency"])
    table = point_table(run_of([*records, *extra], base / "b")).set_index(["model", "concurrency"])
    for key, row in plain.iterrows():
        got = table.loc[key]
        for col in ("rps", "p99_ms", "trials", "server_cpu_pct", "cpu_ms_per_req", "requests"):
            assert same(float(got[col]), float(row[col])), (key, col)
    never = table.loc[("never-measured", 7)]
    assert never["trials"] == 0 and never["requests"] == 0 and WHY in never["flags"]


def test_a_skipped_third_trial_is_not_a_zero() -> None:
    """The issue's case: a 2-trial point of 96.6 rps printed 64.4 once a skipped third trial was
    appended to it."""
    trials = [
        step_record("run", StepKey("m", "closed", 10, None, t), window(rps))
        for t, rps in ((1, 100.0), (2, 93.2))
    ]
    p = point([*trials, skipped("m", 10, 3)])
    assert p.rps == pytest.approx(96.6) and p.trials == 2 and p.excluded_by == (WHY,)
