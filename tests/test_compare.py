"""`lab compare` knows what it compares: a point whose tail a flag keeps out is never compared on
p99, runs of different scenarios say so first with the points that have no partner, and the
exit code says what was found. Built run directories, the real command."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from analysis.compare import compare, scenario_differences, unpaired
from analysis.loading import load
from lab.record import errors
from lab.verdict.difference import FLAGGED
from tests.fixture_run import FixtureStep, build_run
from tests.helpers import lab_cli

SLOW = tuple(100.0 + i % 40 for i in range(400))  # 1,200 requests a point: 12 beyond p99


def point(model: str, rps: float, scale: float = 1.0, flags: tuple[str, ...] = ()) -> FixtureStep:
    return FixtureStep(model, 100, 1, (rps,) * 3, tuple(x * scale for x in SLOW), flags=flags)


@pytest.mark.parametrize("flag", ["client_saturated", "generator_lag"], ids=lambda f: f)
def test_a_point_whose_tail_is_excluded_is_never_compared_on_p99(tmp_path: Path, flag: str) -> None:
    a = build_run(tmp_path / "a", [point("m", 400.0)])
    b = build_run(tmp_path / "b", [point("m", 400.0, scale=5.0, flags=(flag,))])
    (row,) = compare(load(a), load(b)).to_dict("records")
    assert row["p99_basis"] == FLAGGED and not row["p99_significant"]
    assert row["rps_basis"] != FLAGGED  # its throughput is still compared


def test_runs_of_other_scenarios_say_so_first_and_list_the_unpaired_points(
    tmp_path: Path,
) -> None:
    a = build_run(tmp_path / "a", [point("m", 400.0), point("n", 400.0)])
    b = build_run(tmp_path / "b", [point("m", 320.0)], delay_ms=125.0)
    said = scenario_differences(load(a), load(b))
    assert said[0].startswith("upstream delay: delay_ms 100.0 in A, 125.0 in B")
    assert any(line.startswith("models: ['m', 'n'] in A, ['m'] in B") for line in said)
    assert unpaired(load(a), load(b)) == ["only in A: n at 100 users"]
    out = subprocess.run(lab_cli("compare", str(a), str(b)), capture_output=True, text=True)
    assert out.returncode == errors.EXIT_OTHER_SCENARIO, out.stderr
    first = out.stdout.splitlines()[0]
    assert first.startswith("the runs differ in scenario"), out.stdout
    assert "only in A: n at 100 users" in out.stdout
    assert out.stdout.index("only in A") < out.stdout.index("rps change")


def test_a_printed_change_lies_inside_its_interval(tmp_path: Path) -> None:
    a = build_run(tmp_path / "a", [point("m", r) for r in (400.0,)])
    steps = [FixtureStep("m", 100, t, (r,) * 3, SLOW) for t, r in ((1, 400.0), (2, 1000.0))]
    b = build_run(tmp_path / "b", steps)
    (row,) = compare(load(a), load(b)).to_dict("records")
    assert row["rps_ci_lo"] <= row["rps_change"] <= row["rps_ci_hi"]
    assert row["rps_ci_lo"] >= -1.0 and row["p99_ci_lo"] >= -1.0


def test_a_route_p99_change_is_the_tests_and_corrected_for_the_routes() -> None:
    """`lab compare`'s per-route p99: the one test over the trials' own p99s with its interval,
    a change starred only once corrected (BH) over every route compared, a thin route not
    compared, a route with no answers printed "-", and the count said. Each row is read on its
    own: p99 A and B are the trials' means, computed here from the trials given."""
    import statistics

    import pandas as pd
    from rich.console import Console

    from analysis.routes import COLUMNS, compare_table
    from lab.verdict.difference import tail

    def frame(slow: tuple[float, ...], thin: tuple[float, ...]) -> pd.DataFrame:
        rows = [
            ["m", "10 users", "/slow", 0.4, 6000, 50.0, slow[0], True, tail(slow, [2000] * 3)],
            ["m", "10 users", "/thin", 0.4, 300, 50.0, thin[0], False, tail(thin, [100] * 3)],
            ["m", "10 users", "/none", 0.2, 0, 0.0, 0.0, False, tail((), [0] * 3)],
        ]
        return pd.DataFrame(rows, columns=COLUMNS)

    slow_a, slow_b, thin_a, thin_b = (
        (100.0, 101.0, 99.5),
        (300.0, 302.0, 298.5),
        (80.0,) * 3,
        (400.0,) * 3,
    )
    table = compare_table(frame(slow_a, thin_a), frame(slow_b, thin_b))
    assert table is not None
    console = Console(record=True, width=200)
    console.print(table)
    said = console.export_text()
    rows = {line.split()[3]: line for line in said.splitlines() if " /" in line}
    slow = rows["/slow"].split()
    means = [f"{statistics.fmean(x):.1f}" for x in (slow_a, slow_b)]
    assert slow[6:8] == means and "+" in slow[8] and slow[-1] == "*", slow  # the change, starred
    thin = rows["/thin"].split()
    assert thin[6:] == ["80.0", "400.0", "too", "few"]  # 1 answer beyond p99 a trial: no claim
    assert rows["/none"].split()[6:8] == ["-", "-"]
    assert "1 of 1 route p99s tested changed (*), Benjamini-Hochberg-corrected" in " ".join(
        said.split()
    )
