"""Your own app under every model, with real PostgreSQL and Redis processes behind it."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import psutil
import pytest

from lab.backends import databases, dbrun
from lab.config.models import Registry, load_registry
from lab.config.userapp import inspect_app, parse_routes
from lab.record.errors import LabError
from lab.run import appcheck
from lab.system import procs
from tests.helpers import lab_cli, step_rows

WSGI_MODELS = (
    "uwsgi-threads",
    "uwsgi-gevent",
    "gunicorn-gevent",
    "gunicorn-gthread",
    "gunicorn-sync",
    "granian-wsgi",
)
GEVENT = {"uwsgi-gevent", "gunicorn-gevent"}
DEMO_APP = """
import ctypes
import time

from flask import Flask, request

app = Flask(__name__)
libc = ctypes.CDLL(None)
not_an_app = 42


@app.get("/hello")
def hello():
    return "hello"


@app.get("/wait")
def wait():
    time.sleep(0.2)  # looked up at call time: gevent's patched sleep under gevent
    return "waited"


@app.route("/cwait", methods=["GET", "POST"])
def cwait():
    if request.method == "POST" and request.headers.get("X-Token") != "t0k":
        return "no token", 403
    if request.method == "POST" and request.get_json(silent=True) != {"n": 1}:
        return "bad body", 400
    libc.usleep(200_000)  # a C call gevent cannot see: blocks the whole hub
    return "waited"


@app.get("/burn")
def burn():
    return str(sum(i * i for i in range(2_000_000)))  # about 0.1 s of Python: holds the GIL
"""


@pytest.fixture()
def app_dir(tmp_path: Path) -> Path:
    (tmp_path / "demo_app.py").write_text(DEMO_APP)
    return tmp_path


@pytest.fixture(scope="module")
def wsgi_registry() -> Registry:
    return load_registry()


def run_check(app_dir: Path, out: Path, *args: str) -> tuple[int, str, dict]:
    argv = lab_cli(
        "run",
        "--app",
        "demo_app:app",
        "--app-dir",
        str(app_dir),
        "--knob",
        "concurrency=4",
        "--levels",
        "4",
        "--check-only",
        "--out",
        str(out),
        *args,
    )
    done = subprocess.run(argv, capture_output=True, text=True, timeout=240)
    found = list(out.glob("*/appcheck.json"))
    return done.returncode, done.stderr, json.loads(found[0].read_text()) if found else {}


def by_model(result: dict) -> dict[str, dict]:
    return {m["model"]: m for m in result["models"]}


def test_user_app_runs_under_every_wsgi_model(app_dir: Path, tmp_path: Path) -> None:
    rc, err, result = run_check(app_dir, tmp_path / "out", "--path", "/hello", "--path", "/wait")
    assert rc == 0, err
    models = by_model(result)
    assert set(models) == set(WSGI_MODELS)
    assert result["differences"] == {}
    for name, m in models.items():
        assert not m["error"] and not m["serialized"], name
        assert m["answers"]["/hello"]["status"] == 200


def test_unpatchable_blocking_call_serializes_gevent_models_only(
    app_dir: Path, tmp_path: Path
) -> None:
    models = "uwsgi-threads,uwsgi-gevent,gunicorn-gevent,gunicorn-gthread"
    rc, err, result = run_check(app_dir, tmp_path / "out", "--models", models, "--path", "/cwait")
    assert rc == 0, err
    for name, m in by_model(result).items():
        assert m["serialized"] == (name in GEVENT), (name, m["probe"])
        if name in GEVENT:
            assert "gevent cannot patch" in m["hint"]


def test_a_cpu_bound_route_is_measured_not_flagged_serialized(
    app_dir: Path, tmp_path: Path
) -> None:
    """Requests that queue on the CPU (one process: the GIL runs one at a time) overlap no more
    than serialised ones, but they keep the server on the CPU where a lock's waiters use none:
    CPU-bound, said so, and swept, never refused as `serialized`."""
    models = "gunicorn-gthread,gunicorn-gevent"
    rc, err, result = run_check(app_dir, tmp_path / "out", "--models", models, "--path", "/burn")
    assert rc == 0, err
    for name, m in by_model(result).items():
        assert not m["serialized"], (name, m["probe"])
        assert m["note"].startswith("CPU-bound, not serialised"), (name, m["note"])
        assert m["probe"]["cap"] is None  # the CPU ran them one at a time, not a pool


def test_user_app_is_swept_after_the_check_and_a_serializing_model_is_flagged(
    app_dir: Path, tmp_path: Path
) -> None:
    """Without --check-only the checked app is loaded like the lab's own, here with a POST, a
    JSON body and a header (the app answers 4xx without them): d is the load route's time alone,
    the model that serialises it (a C sleep under gevent) carries `serialized` on every step and
    is never best; the run directory holds the check and passes `lab report`."""
    out = tmp_path / "out"
    argv = lab_cli(
        *("run", "--app", "demo_app:app", "--app-dir", str(app_dir)),
        *("--path", "/hello", "--path", "POST /cwait", "--body", '{"n": 1}'),
        *("--header", "X-Token: t0k", "--header", "Content-Type: application/json"),
        *("--models", "uwsgi-threads,uwsgi-gevent"),
        *("--knob", "concurrency=8", "--levels", "1,8", "--duration", "2", "--warmup", "0"),
        *("--out", str(out)),
    )
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    (run_dir,) = out.iterdir()
    assert (run_dir / "appcheck.json").exists()
    scenario = json.loads((run_dir / "manifest.json").read_text())["scenario"]
    assert scenario["route"] == "app" and scenario["path"] == "/cwait"
    assert scenario["app"]["target"] == "demo_app:app" and 195 <= scenario["delay_ms"] < 400
    assert scenario["app"]["method"] == "POST" and scenario["app"]["health_path"] == "/hello"
    steps = step_rows(run_dir)
    assert sorted((s["model"], s["users"]) for s in steps) == [
        ("uwsgi-gevent", 1),
        ("uwsgi-gevent", 8),
        ("uwsgi-threads", 1),
        ("uwsgi-threads", 8),
    ]
    # uWSGI's --http-socket closes each connection without saying `Connection: close`, so a
    # keep-alive client now and then sends its next POST into a closed socket: a rare `reset`
    # (1 in 80 seen), not retried for a POST. Anything else, or more, is a failure.
    assert all(s["ok"] > 0 for s in steps), steps
    assert all(set(s["errors"]) <= {"reset"} and sum(s["errors"].values()) <= 2 for s in steps)
    threads8 = next(s for s in steps if s["model"] == "uwsgi-threads" and s["users"] == 8)
    assert threads8["throughput_rps"] > 0.5 * 8 / (scenario["delay_ms"] / 1000), threads8
    assert all("serialized" in s["flags"] for s in steps if s["model"] == "uwsgi-gevent")
    assert not any("serialized" in s["flags"] for s in steps if s["model"] == "uwsgi-threads")
    report = subprocess.run(lab_cli("report", str(run_dir)), capture_output=True, text=True)
    assert report.returncode == 0, report.stderr


@pytest.mark.parametrize(
    "driver,serializes",
    [("psycopg2", True), ("psycopg2-green", False)],
    ids=["psycopg2-plain", "psycopg2-psycogreen"],
)
def test_psycopg2_serializes_gevent_unless_psycogreen(
    driver: str, serializes: bool, wsgi_registry: Registry, tmp_path: Path
) -> None:
    app = inspect_app("servers.app_wsgi:app", None)
    models = wsgi_registry.pick(["uwsgi-gevent", "gunicorn-gevent", "uwsgi-threads"])
    knobs = wsgi_registry.knobs.updated({"concurrency": 4}, "test").resolve(4)
    with (
        databases.running(("postgres",), tmp_path) as dbs,
        dbrun.exported({**databases.environment(dbs), "LAB_DB_DRIVER": driver}),
    ):
        (route,) = parse_routes(("/db?delay_ms=200",), None, ())
        result = appcheck.run(app, models, knobs, (route,), (route,), route, tmp_path)
    for m in result.models:
        assert not m.error, m.error
        assert m.serialized == (serializes and m.model in GEVENT), (m.model, m.probe)


@pytest.mark.parametrize(
    ("paths", "extra", "message"),
    [
        (("PUSH /x",), (), "expected /ROUTE or METHOD /ROUTE"),
        (("orders",), (), "expected /ROUTE or METHOD /ROUTE"),
        (("POST /orders",), (), "needs a GET --path"),
        (("/hello",), ("--header", "no colon"), "expected 'Name: value'"),
    ],
    ids=["bad-method", "no-slash", "no-get-route", "bad-header"],
)
def test_bad_routes_get_one_line_errors(
    app_dir: Path, tmp_path: Path, paths: tuple[str, ...], extra: tuple[str, ...], message: str
) -> None:
    argv = lab_cli("run", "--app", "demo_app:app", "--app-dir", str(app_dir))
    argv += ["--out", str(tmp_path / "out"), *(arg for p in paths for arg in ("--path", p)), *extra]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and message in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "target,message",
    [
        ("missing_module:app", "cannot import it: ModuleNotFoundError"),
        ("demo_app:not_an_app", "is not a WSGI or ASGI application callable"),
        ("demo_app", "expected package.module:attribute"),
    ],
    ids=["no-module", "not-callable", "no-attribute"],
)
def test_bad_app_gets_one_line_error(
    target: str, message: str, app_dir: Path, tmp_path: Path
) -> None:
    argv = lab_cli(
        "run",
        "--app",
        target,
        "--app-dir",
        str(app_dir),
        "--path",
        "/hello",
        "--out",
        str(tmp_path / "out"),
    )
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert message in done.stderr and "Traceback" not in done.stderr
    assert not list((tmp_path / "out").glob("*"))  # nothing half-written


@pytest.mark.parametrize("kind", ["postgres", "redis"])
def test_database_starts_answers_and_leaves_nothing(kind: str, tmp_path: Path) -> None:
    with databases.running((kind,), tmp_path) as dbs:
        databases.ping(dbs[kind])
        (pid_file,) = (tmp_path / "pids").glob("*.pid")
        record = procs.PidRecord.read(pid_file)
        assert record is not None and record.is_running()
        data_dir = next(a for a in record.argv if a.startswith("/tmp/lab-"))
    assert not psutil.pid_exists(record.pid) or not record.is_running()
    assert not list((tmp_path / "pids").glob("*.pid"))
    assert not Path(data_dir).exists()


def test_database_refusing_connections_is_one_line_error() -> None:
    port = procs.free_port()
    with pytest.raises(LabError, match=f"postgres at .*:{port}/x refuses connections"):
        databases.user_database(f"postgresql://lab@127.0.0.1:{port}/x", allow_remote=False)
    with pytest.raises(LabError, match="not a loopback address"):
        databases.user_database("redis://192.0.2.1:6379/0", allow_remote=False)
