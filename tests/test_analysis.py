"""Analysis on fixture runs with hand-computed answers: loading, metrics, intervals, crossovers."""

from __future__ import annotations

import json
import math
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner
from fixture_run import FixtureStep, build_run

from analysis import load
from analysis.compare import compare
from analysis.differences import crossovers
from analysis.judge import judge
from analysis.metrics import flagged, point_table, server_cores, unmeasured
from analysis.points import estimate
from lab.cli.compare import compare_runs
from lab.cli.report import report
from lab.record import hist
from lab.record.hist import percentiles_of, seconds_of
from lab.verdict.difference import TOO_FEW, differ, side, t975
from tests.helpers import ROOT, record, two_models


def _row(table, model: str, conc: int) -> dict:
    sub = table[(table["model"] == model) & (table["concurrency"] == conc)]
    assert len(sub) == 1, f"no single row for {model} c={conc}"
    return sub.iloc[0].to_dict()


@pytest.fixture(scope="module")
def known(tmp_path_factory) -> Path:
    """One model `m`, d = 100 ms, one process on two cpus; values chosen to compute by hand."""
    steps = [
        FixtureStep("m", 1, 1, (8.0, 8.0, 8.0), server_cpu_pct=5.0, server_rss_mb=100.0),
        *[
            FixtureStep(
                "m",
                10,
                trial,
                (rps,) * 3,
                latencies_ms=lat,
                server_cpu_pct=50.0,
                server_rss_mb=109.0,
                errors={"timeout": 5, "reset": 5} if trial == 2 else {},
            )
            for trial, rps, lat in ((1, 45.0, (10.0,) * 9), (2, 50.0, (1000.0,)), (3, 55.0, ()))
        ],
    ]
    return build_run(tmp_path_factory.mktemp("known"), steps)


def test_throughput_ideal_ceiling_efficiency_overhead(known: Path) -> None:
    table = point_table(load(known))
    c10 = _row(table, "m", 10)
    assert c10["rps"] == 50.0  # median of 45, 50, 55
    assert c10["ideal_rps"] == pytest.approx(100.0)  # c/d = 10 / 0.1 s
    # ceiling: c=1 has 5% CPU (below the noise floor), so c=10: 50 rps at 50% -> 100 rps per core,
    # times min(2 cpus, 1 process) = 100
    assert c10["ceiling_rps"] == pytest.approx(100.0)
    assert c10["efficiency"] == pytest.approx(0.5)  # 50 / min(100, 100)
    assert c10["overhead"] == pytest.approx(2.0)  # ideal time / actual time the other way up
    c1 = _row(table, "m", 1)
    assert c1["efficiency"] == pytest.approx(0.8)  # 8 / min(10, 100)
    assert c1["overhead"] == pytest.approx(1.25)


def test_trial_interval_and_unstable_flag(known: Path) -> None:
    c10 = _row(point_table(load(known)), "m", 10)
    half = 4.303 * 5.0 / math.sqrt(3)  # t(0.975, 2) * sd / sqrt(n); sd of 45, 50, 55 is 5
    assert c10["rps_lo"] == pytest.approx(50.0 - half, rel=1e-4)
    assert c10["rps_hi"] == pytest.approx(50.0 + half, rel=1e-4)
    assert c10["ci_basis"] == "trials"
    assert c10["rps_spread"] == pytest.approx(0.2)  # (55 - 45) / 50
    assert "unstable" in c10["flags"]
    assert "unstable" not in _row(point_table(load(known)), "m", 1)["flags"]


def test_single_trial_interval_from_seconds(tmp_path: Path) -> None:
    run = build_run(tmp_path, [FixtureStep("m", 5, 1, (9.0, 10.0, 11.0))])
    row = _row(point_table(load(run)), "m", 5)
    assert row["ci_basis"] == "seconds+floor"  # its seconds, widened by the run-to-run floor
    # its seconds' t interval (sd 1 over 3 seconds, t(2) = 4.303) beside the floor's, read from
    # noise.toml (t(21) = 2.080), not through the code under test
    calibration = tomllib.loads((ROOT / "lab/verdict/noise.toml").read_text())
    assert calibration["points"] == 21, "the reference t below is for 21 degrees of freedom"
    half = math.hypot(4.303 / math.sqrt(3), 2.080 * calibration["rps_sd"] * 10.0)
    assert row["rps_lo"] == pytest.approx(10.0 - half, rel=1e-4)


def test_errors_cpu_and_memory_cost(known: Path) -> None:
    table = point_table(load(known))
    c10 = _row(table, "m", 10)
    assert c10["requests"] == 135 + 150 + 165 + 10
    assert c10["err_timeout"] == 5 and c10["err_reset"] == 5 and c10["errors"] == 10
    assert c10["error_rate"] == pytest.approx(10 / 460)
    # 50% of a core for 3 s = 1500 ms; per trial / its requests, the mean of 1500/135, /160, /165
    # (a point's every figure is its trials' mean, as its throughput and p99 are)
    assert c10["cpu_ms_per_req"] == pytest.approx((1500 / 135 + 1500 / 160 + 1500 / 165) / 3)
    assert c10["rss_per_conn_kb"] == pytest.approx(9 * 1024 / 9)  # +9 MB for 9 more connections
    assert math.isnan(_row(table, "m", 1)["rss_per_conn_kb"])


def test_percentiles_come_from_merged_histograms(known: Path) -> None:
    """27 samples at 10 ms in trial 1 and 3 at 1000 ms in trial 2: the merged p99 is 1000, not an
    average; the p99 the table prints is the one the claims test, the trials' own p99s' mean."""
    run = load(known)
    c10 = _row(point_table(run), "m", 10)
    assert c10["latency_source"] == "histogram"
    assert c10["p50_ms"] == pytest.approx(10.0, rel=1e-3)
    assert c10["p99_merged_ms"] == pytest.approx(1000.0, rel=1e-3)
    assert c10["max_ms"] == pytest.approx(1000.0, rel=1e-3)
    per_trial_p99 = load(known).steps.query("concurrency == 10 and trial < 3")["p99_ms"]
    assert per_trial_p99.mean() == pytest.approx(505.0, rel=1e-3)  # what averaging would claim
    answered = [r.latency.latency_ms["p99"] for r in run.records if r.key.level == 10 and r.load.ok]
    assert c10["p99_ms"] == pytest.approx(sum(answered) / len(answered))


def test_missing_histogram_falls_back_to_step_summary(tmp_path: Path) -> None:
    run = build_run(tmp_path, [FixtureStep("m", 1, latencies_ms=(42.0,), write_hlog=False)])
    row = _row(point_table(load(run)), "m", 1)
    assert row["latency_source"].startswith("step summary")
    assert row["p99_ms"] == pytest.approx(42.0, rel=1e-3)


def test_truncated_last_lines_and_run_in_progress(tmp_path: Path) -> None:
    run = build_run(tmp_path, [FixtureStep("m", 1), FixtureStep("m", 10)])
    with open(run / "steps.jsonl", "a") as f:
        f.write('{"run_id": "fixture", "model": "m", "concurr')  # crash mid-write
    hlog = run / "histograms/m/closed-c10-t1.hlog"
    hlog.write_text(hlog.read_text()[:-40])  # last interval cut in half
    manifest = json.loads((run / "manifest.json").read_text())
    manifest.update(status="running", finished_at=None)
    (run / "manifest.json").write_text(json.dumps(manifest))
    loaded = load(run)
    assert len(loaded.steps) == 2
    seconds = loaded.timeseries.query("concurrency == 10")
    assert seconds["p99_ms"].notna().sum() == 2  # the half-written third second is dropped
    assert _row(point_table(loaded), "m", 10)["p99_ms"] == pytest.approx(100.0, rel=1e-3)


def test_stats_by_hand() -> None:
    est = estimate([110.0, 90.0, 100.0])
    assert (est.n, est.median, est.spread) == (3, 100.0, 0.2)
    assert est.unstable
    single = estimate([7.0])
    assert single.median == 7.0 and single.spread == 0 and not single.unstable
    # Welch: means 2 and 3, variances 1, se^2 = 2/3, df = 4, t = 2.776445 (six decimals)
    a = [record("a", x, trial=t) for t, x in enumerate((1.0, 2.0, 3.0), 1)]
    b = [record("b", x, trial=t) for t, x in enumerate((2.0, 3.0, 4.0), 1)]
    change = differ(side(a, "rps"), side(b, "rps"))
    half = 2.776445 * math.sqrt(2 / 3)
    assert change.diff == 1.0 and change.basis == "trials"
    assert (change.lo, change.hi) == (pytest.approx(1 - half), pytest.approx(1 + half))
    assert not change.apart
    a = [record("a", x, trial=t) for t, x in enumerate((10.0, 10.5, 9.5), 1)]
    b = [record("b", x, trial=t) for t, x in enumerate((20.0, 20.5, 19.5), 1)]
    assert differ(side(a, "rps"), side(b, "rps")).apart
    assert t975(1000) == pytest.approx(1.962, abs=0.002)


@pytest.fixture(scope="module")
def two(tmp_path_factory) -> Path:
    return two_models(tmp_path_factory.mktemp("two"))


def test_crossovers_on_throughput_and_p99(two: Path) -> None:
    run = load(two)
    found = crossovers(point_table(run), run.points)
    got = {
        (r.metric, r.overtaker, r.overtaken, r.from_concurrency, r.concurrency)
        for r in found.itertuples()
    }
    # b's p99 at c=10 is no evidence (its generator was saturated: its own queue is in every
    # latency it timed), so the p99 crossover is seen between c=1 and c=100
    assert got == {("rps", "b", "a", 1, 10), ("p99_ms", "b", "a", 1, 100)}
    clear = dict(zip(found["metric"], found["clear"], strict=True))
    assert clear == {"rps": True, "p99_ms": False}  # 540 requests a point: 5.4 beyond p99


def test_verdict_ranges_and_flags_visible(two: Path) -> None:
    run = load(two)
    table = point_table(run)
    rankings = judge(run.points)
    assert [(v.level, v.best_rps[0]) for v in rankings] == [(1, "a"), (10, "b"), (100, "b")]
    # c=10 carries a client-saturated note and c=100 does not
    assert "load generator" in "; ".join(rankings[1].notes) and not rankings[2].notes
    assert "client_saturated" in _row(table, "b", 10)["flags"]


def test_serialized_model_is_shown_but_excluded(tmp_path: Path) -> None:
    run = two_models(
        tmp_path,
        preflight={"b": {"serialized": True, "message": "no overlap"}},
        b_flags=("serialized",),
    )
    loaded = load(run)
    table = point_table(loaded)
    assert len(table) == 6  # nothing dropped
    assert not table[table["model"] == "b"]["fair"].any()
    assert {v.best_rps for v in judge(loaded.points)} == {("a",)}
    assert crossovers(table, loaded.points).empty
    why = flagged(table)
    assert (why["model"] == "b").sum() == 3 and why["why"].str.contains("not a fair result").all()


def test_compare_same_run_and_a_real_change(two: Path, tmp_path: Path) -> None:
    same = compare(load(two), load(two))
    assert len(same) == 6 and not same["rps_significant"].any()
    faster = [
        FixtureStep("a", 10, trial, (rps,) * 3, (110.0,), limited_by="server_cpu")
        for trial, rps in ((1, 180.0), (2, 181.0))
    ]
    changed = compare(load(two), load(build_run(tmp_path / "b", faster)))
    assert len(changed) == 1
    row = changed.iloc[0]
    assert row["rps_change"] == pytest.approx(1.0, rel=0.01) and row["rps_significant"]
    assert row["rps_basis"] == "trials" and row["p99_basis"] == TOO_FEW  # 5.4 beyond p99
    assert (row["limited_by_a"], row["limited_by_b"]) == ("", "server_cpu")  # why it changed


@pytest.mark.parametrize(
    "files, message",
    [
        (None, "no such run directory"),
        ({}, "not a run directory"),
        ({"steps.jsonl": ""}, "has no manifest.json"),
        ({"steps.jsonl": "", "manifest.json": "{x"}, "unreadable manifest"),
    ],
    ids=["missing-dir", "no-steps", "no-manifest", "bad-manifest"],
)
def test_cli_bad_input_is_a_clear_error(tmp_path: Path, files: dict | None, message: str) -> None:
    path = tmp_path / "run"
    if files is not None:
        path.mkdir()
        for name, text in files.items():
            (path / name).write_text(text)
    for command, args in ((report, [str(path)]), (compare_runs, [str(path), str(path)])):
        result = CliRunner().invoke(command, args)
        assert result.exit_code == 2, result.output  # a usage error
        assert message in result.output
        assert "Traceback" not in result.output
        assert isinstance(result.exception, SystemExit)


def test_cli_compare_prints_verdict(two: Path) -> None:
    result = CliRunner().invoke(compare_runs, [str(two), str(two)])
    assert result.exit_code == 0, result.output
    said = " ".join(result.output.split())
    tested = "0 of 6 points tested changed (*) in throughput, 0 of 1 in p99"
    assert f"{tested}, Benjamini-Hochberg-corrected" in said
    assert "0 of 6 changed what limits them" in said


def test_spectrum_table_is_tidy(known: Path) -> None:
    spectra = load(known).spectra
    c10 = spectra[spectra["concurrency"] == 10].set_index("nines")
    assert c10.loc[0.0, "latency_ms"] == pytest.approx(10.0, rel=1e-3)  # 0th percentile
    assert c10.loc[2.0, "latency_ms"] == pytest.approx(1000.0, rel=1e-3)  # 99%
    assert (c10["count"] == 30).all()


def test_model_without_steps_is_reported(tmp_path: Path) -> None:
    run = build_run(
        tmp_path, [FixtureStep("m", 1)], preflight={"x": {"ok": False, "message": "body differs"}}
    )
    missing = unmeasured(load(run))
    assert missing.values.tolist() == [["x", "preflight_failed: body differs"]]
    result = CliRunner().invoke(report, [str(run)])
    assert result.exit_code == 0, result.output
    assert "x: no measured step (preflight_failed: body differs)" in result.output
    assert "body differs" in (run / "report.html").read_text()


def test_compare_single_trials_uses_seconds(tmp_path: Path) -> None:
    runs = [build_run(tmp_path / n, [FixtureStep("m", 10, 1, (90.0, 100.0, 110.0))]) for n in "ab"]
    row = compare(load(runs[0]), load(runs[1])).iloc[0]
    assert (row["rps_basis"], row["p99_basis"]) == ("seconds+floor", TOO_FEW)
    assert not row["rps_significant"] and not row["p99_significant"]


@pytest.mark.parametrize(
    "server, usable, processes, cores",
    [
        ([1], [0, 1], 2, 1.0),
        ([], [0, 1], 1, 1.0),
        ([], [0, 1], 4, 2.0),
        ([2, 3], [0, 1, 2, 3], 8, 2.0),
    ],
    ids=["pinned-one-core", "one-process", "processes-capped-by-cores", "pinned-two-cores"],
)
def test_server_cores(server: list[int], usable: list[int], processes: int, cores: float) -> None:
    manifest = {
        "execution": {"cpu_layout": {"server": server}},
        "environment": {"cpus_usable": usable, "cpus": len(usable)},
        "knobs": {"processes": processes},
        "models": {"m": {}},
    }
    assert server_cores(manifest, "m") == cores


def test_run_where_every_preflight_failed(tmp_path: Path) -> None:
    run = build_run(
        tmp_path, [FixtureStep("m", 1)], preflight={"m": {"ok": False, "message": "500"}}
    )
    (run / "steps.jsonl").unlink()
    result = CliRunner().invoke(report, [str(run)])
    assert result.exit_code == 0, result.output
    assert "m: no measured step (preflight_failed: 500)" in result.output
    assert "No step has been measured yet" in (run / "report.html").read_text()


def test_compact_percentiles_match_hdrhistogram() -> None:
    values = [0.5 + (i * 37 % 1000) * 1.7 for i in range(997)] + [9000.0, 12000.0, 15000.0]
    h = hist.new_histogram()
    for v in values:
        hist.record_ms(h, v)
    ps = [0.0, 10.0, 50.0, 90.0, 99.0, 99.9, 99.99, 100.0]
    expected = [h.get_value_at_percentile(p) / 1000 for p in ps]
    assert percentiles_of(seconds_of(h), ps) == pytest.approx(expected)
