"""The verdict rules of tests/test_verdict_rules.py on real runs: a route that never calls the
upstream, a server that closes every connection beside one that keeps them alive, a CPU-bound
one-process server, a multi-process server's efficiency."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from analysis import load
from analysis.metrics import point_table
from tests.helpers import lab_cli, step_rows

CAPS = {"capped", "capped_unexplained"}


def run_lab(out: Path, *args: str) -> tuple[Path, list[dict]]:
    common = ("--duration", "3", "--warmup", "0", "--out", str(out))
    done = subprocess.run(
        lab_cli("run", *args, *common), capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    (run,) = out.iterdir()
    steps = step_rows(run)
    return run, steps


@pytest.fixture(scope="module")
def sleep_route(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """/sleep?ms=10 at 50 users: an event loop, a server that closes each connection (uWSGI's
    HTTP router) and one that keeps them alive (gunicorn gthread)."""
    models = "gunicorn-asyncio,uwsgi-threads,gunicorn-gthread"
    args = ("--route", "sleep", "--delay-ms", "10", "--models", models, "--levels", "50")
    _, steps = run_lab(tmp_path_factory.mktemp("sleep"), *args)
    return {s["model"]: s for s in steps}


@pytest.mark.parametrize("model", ["gunicorn-asyncio", "uwsgi-threads", "gunicorn-gthread"])
def test_an_idle_upstream_counter_is_never_read_as_a_cap(
    sleep_route: dict[str, dict], model: str
) -> None:
    step = sleep_route[model]
    assert step["ok"] > 0 and step["upstream_served"] == 0, step["upstream_served"]
    for flag in CAPS & set(step["flags"]):  # only ever inferred from outside, never a 0
        assert step["details"][flag]["seen_by"].startswith("Little's law"), step["details"]
    assert "seen by the upstream" not in step["limit_reason"]


def test_connections_per_request_are_counted(sleep_route: dict[str, dict]) -> None:
    """Each request to uWSGI is a connection; on oha a request sent on a connection uWSGI had
    closed is a reconnect, reset rather than closed (no TIME_WAIT to count), so the two add up."""
    closing, alive = sleep_route["uwsgi-threads"], sleep_route["gunicorn-gthread"]
    reconnects = closing["details"]["engine"].get("reconnects", 0)
    assert closing["server_connections"] + reconnects >= 0.8 * closing["requests"], closing
    assert closing["server_time_wait"] > 0
    assert alive["server_connections"] <= 0.1 * alive["requests"], alive


def test_a_generator_busy_with_connections_is_not_told_to_add_generators(
    sleep_route: dict[str, dict],
) -> None:
    step = sleep_route["uwsgi-threads"]
    if step["limited_by"] not in ("apparatus", "connections", "host_cpu", "server_cpu"):
        pytest.skip(f"the apparatus kept up here ({step['limited_by']}): nothing to blame")
    assert step["limited_by"] != "apparatus", step["limit_reason"]
    assert "use more generators" not in step["limit_reason"]


def test_a_cpu_bound_one_process_server_is_server_cpu_not_capped(tmp_path: Path) -> None:
    """gunicorn gthread, one process, 100 users at 5 ms: the process is at its core's CPU while
    the upstream sees fewer requests than offered; that queue is the CPU's, not a pool's."""
    args = ("--models", "gunicorn-gthread", "--knob", "processes=1", "--delay-ms", "5")
    _, (step,) = run_lab(tmp_path, *args, "--levels", "100")
    assert step["server_cpu_pct"] >= 80, step["server_cpu_pct"]
    assert step["limited_by"] == "server_cpu", step["limit_reason"]
    assert not CAPS & set(step["flags"]), step["details"]
    assert "use more generators" not in step["limit_reason"]


def test_a_multi_process_servers_efficiency_is_at_most_one(tmp_path: Path) -> None:
    args = ("--models", "uwsgi-threads,gunicorn-gthread", "--knob", "processes=2")
    run, _ = run_lab(tmp_path, *args, "--delay-ms", "5", "--levels", "10,100")
    table = point_table(load(run))
    assert len(table) == 4
    assert (table["efficiency"] <= 1.0).all(), table[["model", "concurrency", "efficiency"]]
    # a ceiling, where one was measured (a model with no fair point has none), is never below
    # the throughput measured
    ceiling = table["ceiling_rps"]
    assert (ceiling.isna() | (ceiling >= table["rps"])).all(), table[["model", "ceiling_rps"]]
