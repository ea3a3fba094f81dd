"""A user's app's environment: `--env NAME=VALUE` and a scenario's `[env]`, with placeholders for
the lab's mock upstream, PostgreSQL and Redis, resolved in the check, the probe and every server
of the sweep."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from lab.config import appenv
from lab.record.errors import LabError
from tests.helpers import lab_cli, step_rows

# Waits on the lab's PostgreSQL and calls its mock upstream, both found in the environment: a
# server that did not get them answers 500, which the check refuses.
CONFIGURED_APP = """
import os, urllib.request
import psycopg2
from flask import Flask

app = Flask(__name__)


@app.get("/hello")
def hello():
    return {"mode": os.environ["APP_MODE"]}


@app.get("/wait")
def wait():
    with psycopg2.connect(os.environ["DATABASE_URL"]) as conn, conn.cursor() as cur:
        cur.execute("SELECT pg_sleep(0.1)")
    upstream = urllib.request.urlopen(os.environ["API_URL"] + "/delay", timeout=10).read()
    return {"waited": True, "upstream": len(upstream)}
"""


@pytest.mark.parametrize(
    ("texts", "message"),
    [
        (("API_URL",), "expected NAME=VALUE"),
        (("1X=y",), "expected NAME=VALUE"),
        (("API_URL={upstream}",), "unknown placeholder {upstream}; known: {upstream_url}"),
    ],
    ids=["no-value", "bad-name", "unknown-placeholder"],
)
def test_bad_env_is_named(texts: tuple[str, ...], message: str) -> None:
    with pytest.raises(LabError, match=message.replace("{", r"\{").replace("}", r"\}")):
        appenv.parse(texts)


def test_placeholders_resolve_to_what_the_run_started() -> None:
    env = appenv.parse(["A={upstream_url}/v1", "H={upstream_host}:{upstream_port}", 'J={"k": 1}'])
    environ = {"LAB_DB_URL": "postgresql://lab@127.0.0.1:5433/lab"}
    got = appenv.resolved(env, "http://127.0.0.1:4567") | {
        "D": appenv.resolve("{postgres_url}", "", environ)
    }
    assert got == {
        "A": "http://127.0.0.1:4567/v1",
        "H": "127.0.0.1:4567",
        "J": '{"k": 1}',  # braces that are no placeholder stay as they are
        "D": "postgresql://lab@127.0.0.1:5433/lab",
    }
    assert appenv.databases(appenv.parse(["X={redis_url}", "Y={postgres_url}"])) == (
        "postgres",
        "redis",
    )


def test_an_app_configured_by_env_and_scenario_is_checked_and_swept(tmp_path: Path) -> None:
    """DATABASE_URL from the scenario's [env], API_URL and APP_MODE from --env: the check and
    every server of the sweep reach the lab's own PostgreSQL and mock upstream."""
    (tmp_path / "configured.py").write_text(CONFIGURED_APP)
    scenario = tmp_path / "mine.toml"
    scenario.write_text(
        'levels = [2]\nduration_s = 2\nwarmup_s = 0\n[env]\nDATABASE_URL = "{postgres_url}"\n'
    )
    argv = lab_cli(
        *("run", "--scenario", str(scenario), "--app", "configured:app"),
        *("--app-dir", str(tmp_path), "--models", "uwsgi-threads", "--knob", "concurrency=4"),
        *("--env", "API_URL={upstream_url}", "--env", "APP_MODE=lab"),
        *("--path", "/hello", "--path", "/wait", "--out", str(tmp_path / "out")),
    )
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    run_dir = next((tmp_path / "out").iterdir())
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert dict(manifest["scenario"]["app"]["env"])["DATABASE_URL"] == "{postgres_url}"
    steps = step_rows(run_dir)
    assert steps and all(s["ok"] > 0 and not s["errors"] for s in steps)


def test_env_in_a_scenario_without_app_is_one_line(tmp_path: Path) -> None:
    scenario = tmp_path / "mine.toml"
    scenario.write_text('[env]\nA = "b"\n')
    argv = lab_cli("run", "--scenario", str(scenario), "--out", str(tmp_path / "out"))
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "[env]: only with --app" in done.stderr


def test_a_slow_import_is_bounded_by_import_timeout(tmp_path: Path) -> None:
    (tmp_path / "slow_import.py").write_text("import time\ntime.sleep(30)\napp = None\n")
    argv = lab_cli(
        *("run", "--app", "slow_import:app", "--app-dir", str(tmp_path), "--path", "/"),
        *("--import-timeout", "1", "--check-only", "--out", str(tmp_path / "out")),
    )
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert (
        done.returncode == 2
        and "importing it took over 1 s (raise --import-timeout)" in done.stderr
    )
