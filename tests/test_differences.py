"""The summary leads with what differs: a tie of every model said once, then what separates them;
a p99 crossover from single trials is beyond noise only with ten requests beyond p99, beyond the
instrument's error and the run-to-run floor."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from rich.console import Console

from analysis.differences import ADVISE, lead, tied
from analysis.judge import judge
from analysis.loading import load
from analysis.metrics import crossovers, point_table
from analysis.stats import Second
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
    verdicts = judge(run.records)
    assert len(tied(table, verdicts)) == 2
    first, separate, pointer = lead(table, verdicts, run.seconds)
    assert first.startswith("all 3 models tie on throughput at every level; one trial each")
    said = "what separates them at 10 users: server CPU per request 3.00 ms (a)"
    assert separate.startswith(said)
    assert "to 5.50 ms (c)" in separate and "p99 100 ms (b) to 130 ms (a)" in separate
    assert pointer == ADVISE and "lab advise --rps R --p99-ms L" in pointer
    console = Console(record=True, width=200)
    print_summary(run, console)
    said = console.export_text()
    assert "all 3 models tie" in said and "1 user (closed): best rps" not in said


def second(p99_ms: float) -> Second:
    """One second of 1,000 requests, 980 at 50 ms and the slowest 20 at `p99_ms`."""
    return np.array([50.0, p99_ms]), np.array([980.0, 20.0])


def test_a_p99_crossover_from_one_trial_needs_the_seconds_to_show_it(tmp_path: Path) -> None:
    run = load(tied_run(tmp_path))
    table = point_table(run)
    p99 = crossovers(table, run.seconds)[lambda f: f["metric"] == "p99_ms"]
    assert len(p99) == 3 and not p99["clear"].any()  # 300 requests a point: 3 beyond p99
    noisy = {("a", "closed", 10): [second(x) for x in (90, 170, 100)]}
    noisy |= {("b", "closed", 10): [second(x) for x in (160, 95, 110)]}
    noisy |= {("c", "closed", 10): [second(x) for x in (100, 150, 120)]}
    assert not crossovers(table, noisy)["clear"].any()
    steady = {("a", "closed", 10): [second(112)] * 3, ("b", "closed", 10): [second(100)] * 3}
    steady |= {("c", "closed", 10): [second(106)] * 3}
    p99 = crossovers(table, steady)[lambda f: f["metric"] == "p99_ms"]
    assert not p99["clear"].any()  # no spread, but within the instrument's 15%
    far = {("a", "closed", 10): [second(400)] * 3, ("b", "closed", 10): [second(100)] * 3}
    far |= {("c", "closed", 10): [second(115)] * 3}
    p99 = crossovers(table, far)[lambda f: f["metric"] == "p99_ms"]
    assert set(p99.loc[p99["clear"], "overtaken"]) == {"a"}  # 4x apart: beyond noise
