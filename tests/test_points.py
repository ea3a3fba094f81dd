"""The run's points, built once (`analysis.points`): the figure the point table prints is the
figure its claims test, a crossover points the way the tested figures do, and one summary plus
one report build each point once. The expected figures come from the reference in
tests/test_claims_properties.py (plain arithmetic over the generated trials), never from the
code under test."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, assume, given, settings
from rich.console import Console

import analysis.points
from analysis.differences import crossovers
from analysis.loading import load
from analysis.metrics import point_table
from analysis.points import build
from analysis.report import write_report
from analysis.summary import print_summary
from lab.cli.report import report
from lab.record.rundir import RunDir
from lab.record.step import StepKey, StepRecord, amended, step_record
from tests.fixture_run import window
from tests.helpers import ref_fair, ref_mean, ref_points, ref_tail_fair, run_of, sweep, two_models

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))


@SETTINGS
@given(sweep())
def test_the_printed_figure_is_the_tested_one_and_crossovers_point_its_way(
    tmp_path_factory: pytest.TempPathFactory, records: list[StepRecord]
) -> None:
    assume(records)  # a sweep with every point missing has no run to read
    run = run_of(records, tmp_path_factory.mktemp("gen") / "run")
    table = point_table(run)
    by_point = ref_points(run.records)
    for row in table.to_dict("records"):
        trials = by_point[(row["model"], row["concurrency"])]
        tested = run.points[(row["model"], row["mode"], row["concurrency"])]
        assert row["rps"] == pytest.approx(ref_mean(trials, "rps"), rel=1e-12)
        assert row["rps"] == tested.throughput.value
        assert row["p99_ms"] == pytest.approx(ref_mean(trials, "p99"), rel=1e-12, nan_ok=True)
        assert math.isnan(row["p99_ms"]) or row["p99_ms"] == tested.latency.value
        assert row["trials"] == len(trials) == len(tested.records)
    cross = crossovers(table, run.points)
    for r in cross.itertuples():
        sign = 1.0 if r.metric == "rps" else -1.0
        name = "rps" if r.metric == "rps" else "p99"
        now, before = (
            [ref_mean(by_point[(m, c)], name) for m in (r.overtaker, r.overtaken)]
            for c in (r.concurrency, r.from_concurrency)
        )
        assert sign * (now[0] - now[1]) > 0 > sign * (before[0] - before[1])
        if r.clear:  # the test called it, in the flip's own direction, on fair points
            fair = ref_fair if name == "rps" else ref_tail_fair
            assert all(fair(by_point[(m, r.concurrency)]) for m in (r.overtaker, r.overtaken))
            assert r.p < 0.05


def count_points(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, float]]:
    """Every point built from here on, by model and level (the one builder's own calls)."""
    built: list[tuple[str, float]] = []
    real = analysis.points.point

    def counted(
        records: list[StepRecord], skipped: list[StepRecord] | tuple[()] = ()
    ) -> analysis.points.Point:
        first = [*records, *skipped][0]
        built.append((first.model, first.key.level))
        return real(records, skipped)

    monkeypatch.setattr(analysis.points, "point", counted)
    return built


def each_once(run_dir: Path) -> list[tuple[str, float]]:
    """Each (model, level) the run measured, once (its trials are one point)."""
    return sorted({(r.model, r.key.level) for r in RunDir(run_dir).steps()})


def test_lab_report_builds_each_point_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`lab report` prints the summary and writes report.html from one set of points."""
    run_dir = two_models(tmp_path / "run")
    built = count_points(monkeypatch)
    result = CliRunner().invoke(report, [str(run_dir)])
    assert result.exit_code == 0, result.output
    assert "crossover" in result.output  # the claims were made (and rendered)
    assert sorted(built) == each_once(run_dir)


def test_a_summary_and_a_report_of_one_run_build_its_points_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Even where each makes its own table and claims, they read the run's one set of points."""
    run = load(two_models(tmp_path / "run"))
    built = count_points(monkeypatch)
    with open(tmp_path / "out.txt", "w") as out:
        print_summary(run, Console(file=out, width=200))
    write_report(run)
    assert sorted(built) == each_once(run.run_dir)


def test_the_front_compares_only_points_the_judge_compares() -> None:
    """A point with one unfair trial is left out of what the front costs, as the judge leaves
    it out of the verdict (the front no longer keeps the point's fair trials as a point)."""
    from dataclasses import replace

    from analysis.front import front_costs
    from analysis.judge import judge
    from lab.record.models import FRONTED
    from tests.helpers import record

    died = {("a" + FRONTED, 1)}  # one of a's two trials behind nginx: the server died
    steps = [
        replace(record(m, 100.0, trial=t, flags=("server_died",) * ((m, t) in died)))
        for m in ("a", "b", "a" + FRONTED, "b" + FRONTED)
        for t in (1, 2)
    ]
    steps = [replace(s, status="measured") for s in steps]
    (ranking,) = judge(build(steps))
    assert set(ranking.excluded) == {"a" + FRONTED}
    said = front_costs(build(steps))
    assert any(line.startswith("behind nginx, b at") for line in said)
    assert not any(line.startswith("behind nginx, a at") for line in said)


def trial(n: int, rps: float, **fields: object) -> StepRecord:
    """A measured 10 s trial of model m at 10 users, `rps` answers a second."""
    record = step_record("run", StepKey("m", "closed", 10, None, n), window(rps))
    return amended(record, **fields)


def of_trials(*trials: StepRecord) -> analysis.points.Point:
    return analysis.points.point(list(trials))


def test_a_points_own_fields_come_from_its_trials() -> None:
    """Each field a point keeps, read from plain arithmetic over its trials (the mutation run
    over analysis/points.py found each of these unread by any test)."""
    steady = of_trials(trial(1, 100.0), trial(2, 105.0))
    assert "unstable" not in steady.flags
    assert steady.p99_beyond == pytest.approx(min(1000, 1050) * 0.01)
    spread = of_trials(trial(1, 100.0), trial(2, 150.0))  # (150 - 100) / 125 = 40%: >= 10%
    assert "unstable" in spread.flags
    unknown = of_trials(trial(1, 90.0, limited_by="unknown", limit_reason="below the ideal"))
    assert unknown.unexplained == "below the ideal"
    known = of_trials(trial(1, 90.0, limited_by="server_cpu", limit_reason="x"))
    assert known.unexplained == ""


def test_a_points_sides_carry_the_flags_given_and_its_skipped_steps() -> None:
    skipped = amended(trial(3, 0.0), status="skipped", flags=("preflight_failed",))
    p = of_trials(trial(1, 100.0), trial(2, 102.0), skipped)
    assert p.sides() == {"rps": p.throughput, "p99": p.latency}
    given_more = p.sides(("serialized",))
    for side in (p.throughput, p.latency, *given_more.values()):
        assert "preflight_failed" in side.unfit
    assert all("serialized" in s.unfit for s in given_more.values())
    assert "serialized" not in p.throughput.unfit


def test_only_keeps_the_points_of_the_models_named() -> None:
    a, b = of_trials(trial(1, 100.0)), of_trials(replace(trial(1, 90.0), model="b"))
    data = {("m", "closed", 10): a, ("b", "closed", 10): b}
    assert analysis.points.only(data, {"b"}) == {("b", "closed", 10): b}
