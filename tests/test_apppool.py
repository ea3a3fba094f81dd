"""The app's own pool named: a plateau as high as the connections the app's processes held to
the lab's PostgreSQL (or Redis, or the upstream) is that pool, compared like a knob's cap."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from lab.record.flags import excluding
from lab.record.step import Sampled, StepKey, amended, step_record
from lab.run import appcheck
from lab.run.preflight import Probe
from lab.verdict.assess import assessed
from lab.verdict.capacity import Capacity
from tests.fixture_run import window
from tests.helpers import lab_cli, step_rows
from tests.undisturbed import disturbed, undisturbed

SHOP = Path(__file__).parent / "prodapp"


def capped_step(held: dict[str, int]):  # type: ignore[no-untyped-def]
    """100 users, 200 req/s at d = 100 ms: 20 in flight by Little's law, p50 five delays, the
    server idle, its knobs allowing 1000: a plateau no knob explains."""
    sampled = Sampled(server_cpu_pct=10, server_rss_mb=60, upstream_max_inflight=-1)
    record = step_record("run", StepKey("m", "closed", 100, None, 1), window(200, 500), sampled)
    cap = Capacity(1000, "1000 threads x 1 process", 1.0, 100.0, 64_000, host_cores=2)
    return assessed(amended(record, app_connections=held), cap)


@pytest.mark.parametrize(
    ("held", "rule", "words", "knob"),
    [
        (
            {"postgres": 20, "upstream": 0},
            "app_pool",
            "20 connections to PostgreSQL",
            "SQLAlchemy's pool_size + max_overflow",
        ),
        (
            {"postgres": 15, "redis": 21},
            "app_pool",
            "21 connections to Redis",
            "redis-py's ConnectionPool max_connections",
        ),
        ({"upstream": 19}, "app_pool", "19 connections to the upstream", "pool_maxsize"),
        ({"postgres": 5}, "hidden_cap", "a connection pool, a lock or a semaphore?", None),
        ({}, "hidden_cap", "a connection pool, a lock or a semaphore?", None),
    ],
    ids=["postgres-pool", "redis-pool", "http-pool", "pool-smaller-than-plateau", "not-read"],
)
def test_a_plateau_as_high_as_the_apps_connections_is_its_pool(
    held: dict[str, int], rule: str, words: str, knob: str | None
) -> None:
    r = capped_step(held)
    ev = r.evidence
    assert ev.limited_by == "concurrency_cap" and ev.limit_rule == rule, ev.limit_reason
    assert words in ev.limit_reason
    assert ("capped_unexplained" in ev.flags) == (rule == "hidden_cap")
    assert bool(excluding(ev.flags)) == (rule == "hidden_cap")  # the app's pool stays compared
    if knob is not None:  # the knob that sizes the pool of the service named, not another's
        assert knob in ev.limit_reason, ev.limit_reason


def sweep_pool_of_4(out: Path, shop: Path) -> dict:  # type: ignore[type-arg]
    argv = lab_cli(
        *("run", "--app", "shop:create_app('lab', pool_size=4, max_overflow=0)"),
        *("--app-dir", str(shop), "--env", "DATABASE_URL={postgres_url}"),
        *("--path", "/health", "--path", "/slow", "--models", "uwsgi-threads"),
        *("--knob", "concurrency=12", "--levels", "12", "--duration", "3", "--warmup", "0"),
        *("--out", str(out)),
    )
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    (run_dir,) = out.iterdir()
    (step,) = step_rows(run_dir)
    return step  # type: ignore[no-any-return]


def test_an_apps_own_pool_is_named_end_to_end_and_still_compared(tmp_path: Path) -> None:
    """SQLAlchemy's pool of 4 (no overflow) on a route that waits 100 ms in PostgreSQL, 12
    users, a real sweep: the step records the 4 connections its process held, and the verdict
    names the app's own pool with its knob, flagged `capped`, not excluded (measured again while
    a busy machine names itself first: `tests.undisturbed`)."""
    shop = shutil.copytree(SHOP, tmp_path / "app")
    step = undisturbed(lambda n: sweep_pool_of_4(tmp_path / f"out{n}", shop), lambda s: s)
    assert step["app_connections"]["postgres"] == 4, step["app_connections"]
    if not disturbed(step):
        assert step["limit_rule"] == "app_pool", step["limit_reason"]
        assert "at most 4 connections to PostgreSQL" in step["limit_reason"]
        assert "pool_size + max_overflow" in step["limit_reason"]
        assert "capped" in step["flags"] and not excluding(step["flags"])


def test_the_check_sees_sqlalchemys_default_pool_of_15(tmp_path: Path) -> None:
    """The issue's app: a factory-built Flask app with SQLAlchemy's default pool (5 + 10) on a
    route that waits 50 ms in PostgreSQL, under uWSGI threads allowed 40 at once: the probe sends
    8, then 32 at once, and names a cap of 15, the connections the app held (the overlap alone
    reads anything from 11 to 19 on a busy machine), not 8 or 5."""
    shop = shutil.copytree(SHOP, tmp_path / "app")
    argv = lab_cli(
        *("run", "--app", "shop:create_app('lab')", "--app-dir", str(shop)),
        *("--env", "DATABASE_URL={postgres_url}", "--path", "/health", "--path", "/report"),
        *("--models", "uwsgi-threads", "--knob", "concurrency=40", "--check-only"),
        *("--out", str(tmp_path / "out")),
    )
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    result = json.loads(next((tmp_path / "out").glob("*/appcheck.json")).read_text())
    (probe,) = [m["probe"] for m in result["models"]]
    assert probe["k"] == 32 and probe["cap"] == 15, probe


def test_a_driver_that_blocks_the_gevent_hub_is_named_with_its_fix(tmp_path: Path) -> None:
    """The shop's SQLAlchemy engine on psycopg2, unpatched: under gevent the probe on a route
    that waits in PostgreSQL sees one request at a time, and the hint names the driver and
    psycogreen; a threaded model overlaps the same route."""
    shop = shutil.copytree(SHOP, tmp_path / "app")
    argv = lab_cli(
        *("run", "--app", "shop:create_app('lab')", "--app-dir", str(shop)),
        *("--env", "DATABASE_URL={postgres_url}", "--env", "DB_DRIVER=psycopg2"),
        *("--path", "/health", "--path", "/slow"),
        *("--models", "gunicorn-gevent,uwsgi-threads", "--knob", "concurrency=8"),
        *("--check-only", "--out", str(tmp_path / "out")),
    )
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(next((tmp_path / "out").glob("*/appcheck.json")).read_text())
    models = {m["model"]: m for m in result["models"]}
    assert models["gunicorn-gevent"]["serialized"] and not models["uwsgi-threads"]["serialized"]
    assert "psycogreen" in models["gunicorn-gevent"]["hint"], models["gunicorn-gevent"]["hint"]


@pytest.mark.parametrize(
    ("overlap", "held", "cap"),
    [(14.5, 15, 15.0), (12.87, 5, None), (30.0, 15, None), (14.5, 1, None), (14.5, 32, None)],
    ids=["pool-of-15", "reading-missed-the-peak", "not-short", "one-connection", "k-connections"],
)
def test_the_connections_held_during_the_probe_are_its_cap(
    overlap: float, held: int, cap: float | None
) -> None:
    """Measured (run 20261127-161357-app): a 32-wide probe on a pool of 15 overlapped 12.87
    while a reading 5 ms apart caught only the pool's 5 kept connections; a count below the
    overlap missed the peak and is no cap."""
    probe = Probe("/report", 32, 50.0, 0.1, [], overlap, 0.4, True)
    assert appcheck._pooled(probe, held).cap == cap
