"""A real (tiny) sweep through the CLI: the run directory and every step's schema."""

from __future__ import annotations

import json
from dataclasses import fields

import pytest

from lab.record import hist
from lab.record.rundir import RunDir
from lab.record.step import StepRecord
from lab.record.stepparts import PARTS
from lab.system import tools
from tests.helpers import lab_run, module_run, step_rows, undisturbed


def read_jsonl(path):
    """The raw JSON objects of a run file, as a reader without the lab would see them."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


run_dir = module_run(
    *["--models", "gunicorn-asyncio,uwsgi-threads", "--levels", "1,8", "--duration", "2"],
    *["--warmup", "1", "--delay-ms", "50", "--trials", "2", "--order-seed", "3"],
    *["--remeasure", "0"],  # a step a busy machine flagged would add a record: counted below
)


def test_steps_have_the_schema(run_dir):
    raw = read_jsonl(run_dir / "steps.jsonl")
    steps = step_rows(run_dir)
    assert len(raw) == len(steps) == 2 * 2 * 2  # models x levels x trials
    assert len(RunDir(run_dir).steps()) == len(steps)
    for line in raw:  # as written: the key and window, and each part's figures
        assert set(line) == {f.name for f in fields(StepRecord)}
        assert all(
            set(line[name]) == {f.name for f in fields(part)} for name, part in PARTS.items()
        )
    for step in steps:
        assert step["schema_version"] == 3 and step["status"] == "measured"
        assert step["mode"] == "closed"
        assert step["run_id"] == run_dir.name
        assert set(step["latency_ms"]) == {"p50", "p90", "p99", "p999", "max", "mean"}
        assert step["ok"] > 0 and step["errors"] == {}
        assert undisturbed(step)
        # throughput counts the answers that arrived in the window, `ok` the requests sent in it
        # and answered: they differ by the requests in flight at its two edges, at most one per
        # user (a 1% tolerance failed on 39 answers at 1 user: one request is 2.6%)
        in_window = step["throughput_rps"] * step["duration_s"]
        assert abs(in_window - step["ok"]) <= step["users"] + 0.01 * step["duration_s"]


def test_latency_comes_from_the_kept_histogram(run_dir):
    for step in step_rows(run_dir):
        whole = hist.load_hlog(run_dir / step["histogram"])
        assert whole.get_total_count() == step["ok"]
        assert hist.summary_ms(whole) == step["latency_ms"]
        assert step["latency_ms"]["p50"] >= 50  # the upstream's delay is a floor


def test_closed_loop_concurrency_reached_the_upstream(run_dir):
    steps = step_rows(run_dir)
    assert {s["upstream_max_inflight"] for s in steps if s["users"] == 8} == {8}
    assert all(len(s["timeseries"]["server_cpu_pct"]) >= 1 for s in steps)


def test_each_trial_runs_the_models_in_its_recorded_shuffled_order(run_dir):
    """The order is drawn per trial from the seed, and kept in the manifest: the steps follow
    it, so drift on the machine falls on no model in particular (issue 53)."""
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["order_seed"] == 3
    steps = step_rows(run_dir)
    for trial, order in enumerate(manifest["order"], start=1):
        ran = [s["model"] for s in steps if s["trial"] == trial]
        assert sorted(order) == ["gunicorn-asyncio", "uwsgi-threads"]
        assert list(dict.fromkeys(ran)) == order


def test_manifest_records_environment_and_commands(run_dir):
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "complete"
    env = manifest["environment"]
    for key in ("python", "packages", "kernel", "cpu_model", "sysctls", "limits", "git_sha"):
        assert key in env
    model = manifest["models"]["uwsgi-threads"]
    assert "--die-on-term" in model["argv"] and model["capacity"] == 8
    assert manifest["knobs"]["concurrency"] == 8
    preflights = read_jsonl(run_dir / "preflight.jsonl")
    assert len(preflights) == 4 and all(p["ok"] and not p["serialized"] for p in preflights)


def test_open_loop_run_is_keyed_by_rate(tmp_path):
    run, _ = lab_run(
        tmp_path,
        *["--models", "gunicorn-asyncio", "--mode", "open", "--rates", "20,40"],
        *["--max-outstanding", "30", "--duration", "2", "--warmup", "0", "--delay-ms", "50"],
        timeout_s=120,
    )
    steps = step_rows(run)
    assert [(s["mode"], s["users"], s["max_outstanding"], s["rate_rps"]) for s in steps] == [
        ("open", None, 30, 20.0),
        ("open", None, 30, 40.0),
    ]
    assert len({s["histogram"] for s in steps}) == 2
    engine = "lab" if tools.missing("oha") else "oha"  # the default: oha where installed
    for step in steps:
        assert step["details"]["engine"]["name"] == engine, step["details"]["engine"]
        achieved = step["details"]["open_loop"]["achieved_rate_rps"]
        assert achieved == pytest.approx(step["rate_rps"], rel=0.1)
        assert step["throughput_rps"] == pytest.approx(step["rate_rps"], rel=0.2)
