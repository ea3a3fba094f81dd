"""The locust web UI with the lab page against `lab ui` (real servers), driven by a real browser
(tests/uibrowser.py, shared with the Docker smoke test), and headless locust, alone or as a master
with workers, writing the same result directory.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import uibrowser
from uibrowser import needs_chromium

from lab.system import procs
from tests.helpers import step_rows, wait_answer

ROOT = Path(__file__).resolve().parent.parent
MODELS = ("uwsgi-threads", "gunicorn-gevent")

pytest.importorskip("playwright.sync_api")


@pytest.fixture()
def lab_ui(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """`lab ui` on a free port; SIGTERM afterwards must stop it and everything it started."""
    port = procs.free_port()
    out = tmp_path / "results"
    argv = [
        str(Path(sys.executable).parent / "lab"),
        "ui",
        "--port",
        str(port),
        "--models",
        ",".join(MODELS),
        "--max-users",
        "50",
        "--out",
        str(out),
    ]  # noqa: E501
    log = open(tmp_path / "lab-ui.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_answer(url + "/", proc, 90)
        yield url, out
    finally:
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=60)
        log.close()
        text = (tmp_path / "lab-ui.log").read_text()
        assert rc == 128 + signal.SIGTERM, text  # docs/failures-and-stops.md's exit codes
        assert "stopped" in text
        assert not procs.group_alive(proc.pid), "lab ui left processes running"
        procs.ensure_port_free("127.0.0.1", port, "locust web UI")  # locust is gone too


@needs_chromium
def test_ui_compares_two_models_and_saves_a_reportable_run(lab_ui: tuple[str, Path]) -> None:
    url, out = lab_ui
    w = uibrowser.Walk(url, MODELS, users=20, delay_ms=100, label="native")
    seen = uibrowser.walk(w)
    uibrowser.check_figures(seen, w, metered=True)
    said, rows = seen.frames  # py-spy on the first model's server, from the page, under load
    assert said.startswith(f"{MODELS[0]}: ") and rows >= 1, seen.frames
    assert Path(seen.saved).parent == out and not seen.saved_on_host
    text = uibrowser.report(Path(seen.saved))
    assert all(model in text for model in MODELS)


def _model_env(start_model, upstream) -> dict[str, str]:  # noqa: ANN001
    """Both models started for real, plus a down one (a closed port) that must not be offered."""
    servers = [start_model(m) for m in MODELS]
    targets = [f"{s.name}={s.url}" for s in servers] + ["uwsgi-gevent=http://127.0.0.1:1"]
    return {
        **os.environ,
        "LAB_TARGETS": ",".join(targets),
        "LAB_UPSTREAM_URL": upstream.url,
        "LAB_SERVER_PIDS": ",".join(f"{s.name}={s.proc.pid}" for s in servers),
    }


def _locust(*args: str) -> list[str]:
    return [sys.executable, "-m", "locust", "-f", "loadgen/locustfile.py,lab/webui/page.py", *args]


HEADLESS = ("--headless", "-u", "4", "-r", "4", "-t", "6s", "--lab-delay-ms", "50")


def _saved_steps(out: Path) -> tuple[Path, list[dict]]:
    """The one run directory under `out`, checked reportable, and its steps."""
    (run_dir,) = out.iterdir()
    steps = step_rows(run_dir)
    assert sorted(s["model"] for s in steps) == sorted(MODELS)
    assert all(s["ok"] > 0 and not s["errors"] and s["histogram"] for s in steps), steps
    assert all((run_dir / s["histogram"]).exists() for s in steps)
    uibrowser.report(run_dir)
    return run_dir, steps


def test_headless_locust_writes_the_same_result_directory(
    start_model, upstream, tmp_path: Path
) -> None:  # noqa: ANN001
    """`locust --headless` with the same locustfiles and --lab-out saves a reportable result,
    one step per model, the down model (a closed port) not offered and so not failing."""
    env = _model_env(start_model, upstream)
    argv = _locust(*HEADLESS, "--lab-out", str(tmp_path / "results"))
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr[-3000:]
    _saved_steps(tmp_path / "results")


@pytest.mark.parametrize("report_wait_s", ["1", "0"], ids=["reports-in-time", "reports-late"])
def test_a_master_saves_what_its_workers_measured(
    start_model, upstream, tmp_path: Path, report_wait_s: str
) -> None:  # noqa: ANN001
    """Distributed, as under Compose: the master makes no requests; its two workers send theirs
    per model at each roll, so the saved steps hold the workers' requests and server CPU. The
    master waits `report_wait_s` (locust's default: 1 s) for its workers to report the users they
    started; on a slow machine they report later (here: always), and the steps are the same."""
    env = _model_env(start_model, upstream)
    env["LOCUST_WAIT_FOR_WORKERS_REPORT_AFTER_RAMP_UP"] = report_wait_s
    port = procs.free_port()
    master = _locust(*HEADLESS, "--master", "--master-bind-host", "127.0.0.1")
    master += ["--master-bind-port", str(port), "--expect-workers", "2"]
    master += ["--lab-out", str(tmp_path / "results"), "--json"]
    worker = _locust("--worker", "--master-host", "127.0.0.1", "--master-port", str(port))
    workers = [subprocess.Popen(worker, cwd=ROOT, env=env, stderr=subprocess.DEVNULL) for _ in "ab"]
    try:
        done = subprocess.run(master, cwd=ROOT, env=env, capture_output=True, text=True, timeout=90)
    finally:
        for w in workers:
            w.wait(timeout=30)
    assert done.returncode == 0, done.stderr[-3000:]
    _, steps = _saved_steps(tmp_path / "results")
    sent = {s["name"].split(" ")[0]: s["num_requests"] for s in json.loads(done.stdout)}
    for step in steps:  # the measured part (after the ramp) of what the workers sent
        assert 0.5 * sent[step["model"]] <= step["ok"] <= sent[step["model"]], (step, sent)
        assert step["users"] == 2 and step["server_cpu_pct"] > 0, step


def test_the_lab_page_labels_an_async_port_as_one(start_model, upstream, tmp_path: Path) -> None:  # noqa: ANN001
    """Every model the page lists says how it serves a Flask app: an ASGI model is an async
    port (its twin, which you would write), never offered as if it ran the app unchanged."""
    servers = [start_model(m) for m in ("uwsgi-threads", "gunicorn-asyncio")]
    env = {
        **os.environ,
        "LAB_TARGETS": ",".join(f"{s.name}={s.url}" for s in servers),
        "LAB_UPSTREAM_URL": upstream.url,
        "LAB_SERVER_PIDS": ",".join(f"{s.name}={s.proc.pid}" for s in servers),
    }
    port = procs.free_port()
    argv = _locust("--web-host", "127.0.0.1", "--web-port", str(port), "--lab-out", str(tmp_path))
    log = open(tmp_path / "locust.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_answer(f"http://127.0.0.1:{port}/lab/data", proc, 60)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/lab/data", timeout=5) as reply:
            rows = json.load(reply)["models"]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()
    labels = {r["model"]: r["your_app"] for r in rows}
    assert labels == {"uwsgi-threads": "as is", "gunicorn-asyncio": "async port"}
