"""The locust web UI with the lab page, driven by a real browser against `lab ui` (real servers).

Debian's chromium is driven by Playwright through `executable_path` (no browser download). The
screenshots go to results/ui-screenshots/ (not committed); the test prints the path.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from lab import procs

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
MODELS = ("uwsgi-threads", "gunicorn-gevent")
SHOTS = ROOT / "results" / "ui-screenshots"

playwright = pytest.importorskip("playwright.sync_api")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed")


def _wait_http(url: str, timeout_s: float, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"lab ui exited with {proc.returncode}"
        try:
            with urllib.request.urlopen(url, timeout=1):
                return
        except OSError:
            time.sleep(0.3)
    raise AssertionError(f"{url} did not answer within {timeout_s} s")


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
        "--workers",
        "50",
        "--out",
        str(out),
    ]  # noqa: E501
    log = open(tmp_path / "lab-ui.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_http(url + "/", 90, proc)
        yield url, out
    finally:
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=60)
        log.close()
        text = (tmp_path / "lab-ui.log").read_text()
        assert rc == 0, text
        assert "stopped" in text
        assert not procs.group_alive(proc.pid), "lab ui left processes running"
        procs.ensure_port_free("127.0.0.1", port, "locust web UI")  # locust is gone too


def test_ui_compares_two_models_and_saves_a_reportable_run(lab_ui: tuple[str, Path]) -> None:
    url, out = lab_ui
    SHOTS.mkdir(parents=True, exist_ok=True)
    print(f"\nscreenshots: {SHOTS}")
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.goto(url + "/")
        for model in MODELS:  # only the two running models are offered
            page.get_by_text(model, exact=True).wait_for()
        page.get_by_role("button", name="Start").click()  # the defaults: 20 users, 100 ms
        rows = page.locator("table tbody tr")
        for model in MODELS:
            rows.filter(has_text=f"{model} /io").first.wait_for(timeout=15_000)
        time.sleep(6)
        page.screenshot(path=str(SHOTS / "locust-statistics.png"))
        names = [r.inner_text().split("\t")[1] for r in rows.all()]
        assert sorted(n for n in names if n.endswith("/io")) == sorted(f"{m} /io" for m in MODELS)
        assert "0%" in page.locator("header").inner_text()  # no failures with the defaults

        page.get_by_role("tab", name="Lab").click()
        page.get_by_text("ideal_rps").wait_for()
        page.screenshot(path=str(SHOTS / "locust-lab-tab.png"))

        lab = browser.new_page(viewport={"width": 1400, "height": 600})
        lab.goto(url + "/lab/")
        figures = _lab_figures(lab)
        lab.screenshot(path=str(SHOTS / "lab-page.png"))
        for model in MODELS:
            users, rps, ideal, p50 = figures[model]
            assert users == 10 and ideal == 100.0
            assert 0.3 * ideal < rps <= 1.2 * ideal, figures
            assert 95 <= p50 < 1000, figures  # at least the 100 ms delay
        assert lab.locator("#inflight").inner_text().isdigit()

        page.get_by_role("button", name="Stop").click()
        lab.get_by_role("button", name="Save run").click()
        lab.get_by_text("saved:").wait_for(timeout=15_000)
        saved = Path(lab.locator("#saved").inner_text().removeprefix("saved: "))
        browser.close()
    assert saved.parent == out
    report = subprocess.run(
        [str(Path(sys.executable).parent / "lab"), "report", str(saved)],
        capture_output=True,
        text=True,
        timeout=120,
    )  # noqa: E501
    assert report.returncode == 0, report.stdout + report.stderr
    for model in MODELS:
        assert model in report.stdout


def _lab_figures(lab: object) -> dict[str, tuple[int, float, float, float]]:
    """model -> (users, rps, ideal rps, p50 ms) from the lab page, once both models show rps."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        out = {}
        for row in lab.locator("#models tbody tr").all():  # type: ignore[attr-defined]
            cells = [c.inner_text() for c in row.locator("td").all()]
            if cells[2] not in ("–", "0"):
                out[cells[0]] = (int(cells[1]), float(cells[2]), float(cells[3]), float(cells[5]))
        if set(out) == set(MODELS):
            return out
        time.sleep(1)
    raise AssertionError("the lab page never showed throughput for both models")


def test_headless_locust_writes_the_same_result_directory(
    start_model, upstream, tmp_path: Path
) -> None:  # noqa: ANN001, E501
    """`locust --headless` with the same locustfiles and --lab-out saves a reportable result,
    one step per model, the down model (a closed port) not offered and so not failing."""
    servers = [start_model(m) for m in MODELS]
    targets = [f"{s.name}={s.url}" for s in servers] + ["uwsgi-gevent=http://127.0.0.1:1"]
    env = {
        **os.environ,
        "LAB_TARGETS": ",".join(targets),
        "LAB_UPSTREAM_URL": upstream.url,
        "LAB_SERVER_PIDS": ",".join(f"{s.name}={s.proc.pid}" for s in servers),
    }  # noqa: E501
    out = tmp_path / "results"
    argv = [
        sys.executable,
        "-m",
        "locust",
        "-f",
        "loadgen/locustfile.py,lab/webui.py",
        "--headless",
        "-u",
        "4",
        "-r",
        "4",
        "-t",
        "5s",
        "--lab-delay-ms",
        "50",
        "--lab-out",
        str(out),
    ]  # noqa: E501
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr[-3000:]
    (run_dir,) = out.iterdir()
    steps = [json.loads(line) for line in (run_dir / "steps.jsonl").read_text().splitlines()]
    assert sorted(s["model"] for s in steps) == sorted(MODELS)
    assert all(s["ok"] > 0 and not s["errors"] and s["histogram"] for s in steps), steps
    assert all((run_dir / s["histogram"]).exists() for s in steps)
    report = subprocess.run(
        [str(Path(sys.executable).parent / "lab"), "report", str(run_dir)],
        capture_output=True,
        text=True,
        timeout=120,
    )  # noqa: E501
    assert report.returncode == 0, report.stdout + report.stderr
