"""The summary leads with what differs: a tie of every model said once, then what separates them;
a p99 crossover from single trials is beyond noise only with ten requests beyond p99, beyond the
instrument's error and the run-to-run floor (the one test of difference)."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console

from analysis.differences import ADVISE, crossovers, lead, tied
from analysis.judge import judge
from analysis.loading import load
from analysis.metrics import point_table
from analysis.points import build
from analysis.summary import print_summary
from tests.fixture_run import FixtureStep, build_run

CPU = {"a": 30.0, "b": 45.0, "c": 55.0}  # % of a core at 10 req/s and at 100 req/s
P99 = {("a", 1): 100.0, ("b", 1): 130.0, ("c", 1): 115.0, ("a", 10): 130.0, ("b", 10): 100.0}


def tied_run(tmp_path: Path) -> Path:
    """Three models at the same throughput at 1 and 10 users, with different costs and p99s."""
    steps = [
        FixtureStep(
            model,
            users,
            rps_per_second=(10.0 * users,) * 3,
            latencies_ms=(P99.get((model, users), 115.0),),
            server_cpu_pct=CPU[model] * users / 10,
        )
        for model in CPU
        for users in (1, 10)
    ]
    return build_run(tmp_path / "run", steps)


def test_a_tie_of_every_model_is_said_once_then_what_separates_them(tmp_path: Path) -> None:
    run = load(tied_run(tmp_path))
    table = point_table(run)
    rankings = judge(run.points)
    assert len(tied(table, rankings)) == 2
    first, separate, pointer = lead(table, rankings, run.points)
    assert first.startswith("all 3 models tie on throughput at every level; one trial each")
    said = "what separates them at 10 users: server CPU per request 3.00 ms (a)"
    assert separate.startswith(said)
    assert "to 5.50 ms (c)" in separate and "p99 100 ms (b) to 130 ms (a)" in separate
    assert pointer == ADVISE and "lab advise --rps R --p99-ms L" in pointer
    console = Console(record=True, width=200)
    print_summary(run, console)
    said = console.export_text()
    assert "all 3 models tie" in said and "1 user (closed): best rps" not in said


def p99_run(run_dir: Path, at_ten: dict[str, float]) -> Path:
    """Three models, one trial each, 1,200 requests a point (12 beyond p99): at 1 user a has the
    lowest p99, at 10 users each has its p99 in `at_ten`."""
    at_one = {"a": 100.0, "b": 130.0, "c": 115.0}
    steps = [
        FixtureStep(m, users, rps_per_second=(400.0,) * 3, latencies_ms=(p99[m],))
        for users, p99 in ((1, at_one), (10, at_ten))
        for m in p99
    ]
    return build_run(run_dir, steps)


@pytest.mark.parametrize(
    ("at_ten", "clear"),
    [
        ({"a": 112.0, "b": 100.0, "c": 106.0}, set()),  # within the instrument's 15%
        ({"a": 130.0, "b": 100.0, "c": 106.0}, set()),  # beyond it, within the floor
        ({"a": 400.0, "b": 100.0, "c": 115.0}, {"a"}),  # 4x apart: beyond noise
    ],
    ids=["within-instrument", "within-floor", "beyond"],
)
def test_a_p99_crossover_from_one_trial_is_clear_only_beyond_noise(
    tmp_path: Path, at_ten: dict[str, float], clear: set[str]
) -> None:
    run = load(p99_run(tmp_path / "run", at_ten))
    found = crossovers(point_table(run), run.points)
    p99 = found[found["metric"] == "p99_ms"]
    assert set(p99.loc[p99["clear"], "overtaken"]) == clear


def test_a_thin_p99_crossover_is_never_clear(tmp_path: Path) -> None:
    run = load(tied_run(tmp_path))
    p99 = crossovers(point_table(run), run.points)[lambda f: f["metric"] == "p99_ms"]
    assert len(p99) == 3 and not p99["clear"].any()  # 30 requests a point: none beyond p99


def test_the_terminal_and_the_report_render_one_set_of_claims(tmp_path: Path) -> None:
    """`lab report` prints and writes the same claims (made once): every verdict line, what
    limits each model, the answer, and how many crossovers were tested, corrected (BH)."""
    import html

    from click.testing import CliRunner

    from analysis.claims import claims
    from lab.cli.report import report

    run_dir = p99_run(tmp_path / "run", {"a": 400.0, "b": 100.0, "c": 115.0})
    result = CliRunner().invoke(report, [str(run_dir)])
    assert result.exit_code == 0, result.output
    run = load(run_dir)
    said = claims(run, point_table(run))
    printed = " ".join(result.output.split())
    page = (run_dir / "report.html").read_text()
    assert (
        said.crossing_count.startswith("2 of 3 ")
        and "Benjamini-Hochberg-corrected" in said.crossing_count
    )
    for line in [*said.ranking, *said.limits, *said.answer, said.crossing_count]:
        assert " ".join(line.split()) in printed
        assert html.escape(line) in page


def test_a_ranking_behind_nginx_prints_ties_as_ties() -> None:
    """Two models the test ties on throughput and a third apart below them: `a = b > c`."""
    from dataclasses import replace

    from analysis.front import front_costs
    from lab.record.models import FRONTED
    from tests.helpers import record

    rates = {"a": 1000.0, "b": 995.0, "c": 500.0}
    records = [
        replace(record(m + suffix, rps), status="measured")
        for m, rps in rates.items()
        for suffix in ("", FRONTED)
    ]
    (ranking,) = [x for x in front_costs(build(records)) if x.startswith("ranking")]
    assert "bare a = b > c; behind nginx a = b > c: unchanged by the front" in ranking


def test_what_separates_tied_models_says_what_the_test_says_of_each_figure(tmp_path: Path) -> None:
    """One trial each: a cost has no run-to-run floor (a description), a p99 of 30 requests has
    too few beyond it; the words after the figures are the claim, read here in full."""
    run = load(tied_run(tmp_path))
    _, separate, _ = lead(point_table(run), judge(run.points), run.points)
    cpu = "server CPU per request 3.00 ms (a) to 5.50 ms (c), one trial each and no run-to-run"
    assert f"{cpu} floor for it: a description, not a claim; " in separate
    assert separate.endswith("p99 100 ms (b) to 130 ms (a), too few requests beyond p99 to tell")


@pytest.mark.parametrize(
    ("low", "high", "words"),
    [
        ((10.0, 10.1, 9.9), (20.0, 20.2, 19.8), "apart beyond noise"),  # twice, trials 1% apart
        ((10.0, 12.0, 8.0), (10.5, 8.5, 12.5), "within noise"),  # means 0.3 apart, SD 2
    ],
    ids=["apart", "within"],
)
def test_two_models_spread_is_the_test_s_word_on_them(
    low: tuple[float, ...], high: tuple[float, ...], words: str
) -> None:
    import statistics

    from analysis.differences import _extremes
    from lab.verdict.difference import Side

    sides = {
        m: Side("cpu_ms_per_req", statistics.fmean(x), x) for m, x in (("a", low), ("b", high))
    }
    lo, hi = (f"{statistics.fmean(x):.2f}" for x in (low, high))
    said = _extremes(sides, "server CPU per request", "ms", "{:.2f}")
    assert said == f"server CPU per request {lo} ms (a) to {hi} ms (b), {words}"
    assert _extremes({"a": sides["a"]}, "server CPU per request", "ms", "{:.2f}") == ""


def test_a_tie_at_one_level_of_two_names_that_level(tmp_path: Path) -> None:
    """Two models: tied at 1 user (10 req/s each), 100 against 50 req/s at 10 users."""
    rates = {("a", 1): 10.0, ("b", 1): 10.0, ("a", 10): 100.0, ("b", 10): 50.0}
    steps = [FixtureStep(m, u, rps_per_second=(r,) * 3) for (m, u), r in rates.items()]
    run = load(build_run(tmp_path / "run", steps))
    table = point_table(run)
    rankings = judge(run.points)
    assert [v.level for v in tied(table, rankings)] == [1]
    first, separate, _ = lead(table, rankings, run.points)
    assert first == "all 2 models tie on throughput at 1 user; one trial each"
    assert separate.startswith("what separates them at 1 user: ")


def test_a_run_s_claims_name_the_floor_of_one_trial_and_no_crossing_without_flips(
    tmp_path: Path,
) -> None:
    from analysis.claims import claims
    from lab.verdict.difference import floor

    steps = [FixtureStep(m, 10, rps_per_second=(r,) * 3) for m, r in (("a", 100.0), ("b", 50.0))]
    run = load(build_run(tmp_path / "run", steps))
    said = claims(run, point_table(run))
    assert said.ranking[-1] == floor().words()  # one trial: its floor said
    assert said.crossing_count == "" and said.crossings.empty  # one level: nothing can flip
