"""The mock upstream at the paths an app really calls, with per-route rules, counted per route."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from lab.config import upstreamroute
from lab.config.scenario import load_scenario
from lab.record.errors import LabError
from tests.helpers import lab_cli, step_rows

SHOP = Path(__file__).parent / "prodapp"


@pytest.mark.parametrize(
    ("text", "rule"),
    [
        ("POST /v1/charges=250ms", {"method": "POST", "path": "/v1/charges", "ms": 250.0}),
        ("/v1/users/*=0.03s", {"method": "", "path": "/v1/users/", "prefix": True, "ms": 30.0}),
        ("GET /v1/me=10 401", {"path": "/v1/me", "ms": 10.0, "status": 401}),
        (
            'POST /pay=5ms 402 {"error": "declined"}',
            {"status": 402, "body": '{"error": "declined"}'},
        ),
    ],
    ids=["method-and-ms", "any-method-prefix-seconds", "status", "status-and-body"],
)
def test_a_rule_is_parsed(text: str, rule: dict[str, object]) -> None:
    parsed = upstreamroute.parse(text)
    assert {k: parsed.get(k, False) for k in rule} == rule


@pytest.mark.parametrize(
    "text",
    ["/v1/charges", "POST v1/charges=1ms", "/x=fast", "/x=1ms 99", "/x=1ms 700", "/x=99999999s"],
    ids=["no-delay", "no-slash", "not-a-number", "status-too-low", "status-too-high", "too-long"],
)
def test_a_bad_rule_is_one_line(text: str) -> None:
    with pytest.raises(LabError, match="--upstream-route") as caught:
        upstreamroute.parse(text)
    assert "\n" not in str(caught.value)


def test_each_step_says_how_many_upstream_calls_a_request_made_and_how_long_they_took(
    tmp_path: Path,
) -> None:
    """The shop's /quote calls its payment API twice, at paths of its own: each call waits its
    rule's delay (not an instant 404), and the step records one call of each per request."""
    shop = shutil.copytree(SHOP, tmp_path / "app")
    argv = lab_cli(
        *("run", "--app", "shop:create_app('lab')", "--app-dir", str(shop)),
        *("--env", "DATABASE_URL={postgres_url}", "--env", "PAYMENTS_API={upstream_url}"),
        *("--upstream-route", "POST /v1/quotes=60ms", "--upstream-route", "GET /v1/rates/*=20ms"),
        *("--path", "/health", "--path", "/quote", "--models", "gunicorn-gthread"),
        *("--knob", "concurrency=4", "--levels", "2", "--duration", "2", "--warmup", "0"),
        *("--out", str(tmp_path / "out")),
    )
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    (run_dir,) = (tmp_path / "out").iterdir()
    scenario = json.loads((run_dir / "manifest.json").read_text())["scenario"]
    assert 78 <= scenario["delay_ms"] < 200  # /quote alone: 20 ms, then 60 ms, upstream
    (step,) = step_rows(run_dir)
    calls = step["upstream_calls"]
    assert set(calls) == {"GET /v1/rates/*", "POST /v1/quotes"}, calls
    assert calls["GET /v1/rates/*"]["mean_ms"] == 20 and calls["POST /v1/quotes"]["mean_ms"] == 60
    for route in calls.values():  # the window's edges may cut a request's two calls apart
        assert 0.8 <= route["per_request"] <= 1.25, calls


def test_a_scenario_files_upstream_routes_reach_the_upstream(tmp_path: Path) -> None:
    path = tmp_path / "mine.toml"
    path.write_text('[upstream]\ndelay_ms = 5\nroutes = ["POST /v1/charges=250ms 402"]\n')
    spec = load_scenario(str(path)).upstream
    flags = spec.argv_flags()
    rules = json.loads(flags[flags.index("--routes") + 1])
    assert rules == [upstreamroute.parse("POST /v1/charges=250ms 402")]
    path.write_text('[upstream]\nroutes = ["POST /v1/charges"]\n')
    with pytest.raises(LabError, match=r"upstream\.routes 'POST /v1/charges': expected"):
        load_scenario(str(path))
