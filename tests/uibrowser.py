"""A real browser driving the locust web UI and its lab page, as a user would: one walk-through
shared by the native test (`lab ui`) and the Docker smoke test (`docker compose up`).

Debian's chromium is driven by Playwright through `executable_path` (no browser download).
Screenshots go to results/ui-screenshots/ (not committed), named by where the UI ran.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
SHOTS = ROOT / "results" / "ui-screenshots"
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed")


@dataclass(frozen=True)
class Walk:
    """What to do: where the UI is, which models to keep, users in all, the expected delay."""

    url: str
    models: tuple[str, ...]
    users: int
    delay_ms: float
    label: str  # "native" or "compose": the screenshots' prefix


@dataclass(frozen=True)
class Seen:
    """What the browser read: the lab page's figures per model and the saved run's paths."""

    figures: dict[str, dict[str, str]]  # model -> column -> cell text
    saved: str  # as the page shows it (inside the container under Compose)
    saved_on_host: str  # "" when the page runs on this host
    frames: tuple[str, int] = ("", 0)  # "Where the time goes" for the first model: said, rows


def walk(w: Walk) -> Seen:
    """Open the UI, keep only the models asked for, start, read one stats row per model and the
    lab page, stop, save the run."""
    from playwright.sync_api import sync_playwright

    SHOTS.mkdir(parents=True, exist_ok=True)
    print(f"\nscreenshots: {SHOTS}/{w.label}-*.png")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.goto(w.url + "/")
        lab = browser.new_page(viewport={"width": 1400, "height": 700})
        _empty_state(lab, w)
        _start(page, w)
        _read_statistics(page, w)
        figures = _lab_figures(lab, w.models)
        frames = _frames(lab, w)
        assert lab.locator("#empty").is_hidden()  # once measuring, the figures replace it
        assert lab.locator("#chart polyline").count() == 2 * len(w.models)  # rps and ideal each
        lab.screenshot(path=str(SHOTS / f"{w.label}-lab-page.png"), full_page=True)
        lab.emulate_media(color_scheme="dark")  # as locust's own UI: the system's choice
        lab.reload()
        lab.locator("#models tbody tr").first.wait_for()
        lab.screenshot(path=str(SHOTS / f"{w.label}-lab-page-dark.png"), full_page=True)
        page.get_by_role("button", name="Stop").click()
        saved = _save(lab, w)
        on_host = lab.locator("#saved-host").inner_text()
        browser.close()
    return Seen(figures, saved, on_host.removeprefix("(on the host: ").removesuffix(")"), frames)


SAVE_WITHIN_MS = 60_000  # a loaded machine's CPU-limited locust master saves slowly, not never


def _save(lab: Any, w: Walk) -> str:
    """Press Save run; the path the page says it saved to (whatever it says instead fails)."""
    lab.get_by_role("button", name="Save run").click()
    lab.wait_for_function(
        "(t => t && t !== 'saving...')(document.getElementById('saved').textContent)",
        timeout=SAVE_WITHIN_MS,
    )
    lab.screenshot(path=str(SHOTS / f"{w.label}-lab-saved.png"), full_page=True)
    said = lab.locator("#saved").inner_text()
    assert said.startswith("saved: "), f"Save run: the page says {said!r}"
    return said.removeprefix("saved: ")


def _frames(lab: Any, w: Walk) -> tuple[str, int]:
    """The page's "Where the time goes" for the first model, sampled while the swarm runs: what
    it said and how many packages its table lists."""
    lab.select_option("#frames-model", w.models[0])
    lab.get_by_role("button", name="Sample 3 s").click()
    lab.wait_for_function(
        "(t => t && !t.startsWith('sampling'))(document.getElementById('frames-said').textContent)",
        timeout=30_000,
    )
    lab.screenshot(path=str(SHOTS / f"{w.label}-lab-page-frames.png"), full_page=True)
    return lab.locator("#frames-said").inner_text(), lab.locator("#frames-table tbody tr").count()


def _empty_state(lab: Any, w: Walk) -> None:
    """Before a start the lab page says what to do, and offers every model that answers."""
    lab.goto(w.url + "/lab/")
    empty = lab.locator("#empty")
    empty.wait_for(state="visible", timeout=10_000)
    assert "press Start" in empty.inner_text() and "Save run" in empty.inner_text()
    for model in w.models:
        lab.locator(f"#models tr[data-model='{model}']").wait_for()
    lab.screenshot(path=str(SHOTS / f"{w.label}-lab-empty.png"), full_page=True)


def _start(page: Any, w: Walk) -> None:
    """Untick every offered model not asked for, set the users, press Start."""
    picker = (
        page.locator("tr").filter(has=page.get_by_role("checkbox")).filter(has=page.locator("td"))
    )
    for model in w.models:
        page.get_by_text(model, exact=True).wait_for()
    for row in picker.all():
        if row.locator("td").nth(1).inner_text().strip() not in w.models:
            row.get_by_role("checkbox").uncheck()
    for field in ("userCount", "spawnRate"):
        page.locator(f"input[name={field}]").fill(str(w.users))
    page.screenshot(path=str(SHOTS / f"{w.label}-start-form.png"))
    page.get_by_role("button", name="Start").click()


def _read_statistics(page: Any, w: Walk) -> None:
    """One statistics row per model, no failures; then the Lab tab."""
    rows = page.locator("table tbody tr")
    for model in w.models:
        rows.filter(has_text=f"{model} /io").first.wait_for(timeout=20_000)
    time.sleep(6)
    page.screenshot(path=str(SHOTS / f"{w.label}-statistics.png"))
    names = [r.inner_text().split("\t")[1] for r in rows.all()]
    assert sorted(n for n in names if n.endswith("/io")) == sorted(f"{m} /io" for m in w.models)
    assert "0%" in page.locator("header").inner_text()  # no failures with the defaults
    page.get_by_role("tab", name="Lab").click()
    page.get_by_text("ideal_rps").wait_for()
    page.screenshot(path=str(SHOTS / f"{w.label}-lab-tab.png"))


COLUMNS = ("model", "your_app", "users", "rps", "ideal", "of_ideal", "p50", "p99", "errors")
COLUMNS += ("cpu", "pss", "front_cpu", "flags")  # the lab page's table, left to right


def _lab_figures(lab: Any, models: tuple[str, ...]) -> dict[str, dict[str, str]]:
    """model -> column -> text from the lab page, once every model shows throughput."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        out = {}
        for row in lab.locator("#models tbody tr").all():
            texts = [c.inner_text() for c in row.locator("td").all()]
            cells = dict(zip(COLUMNS, texts, strict=True))
            if cells.get("rps") not in (None, "–", "0"):
                out[cells["model"]] = cells
        if set(out) == set(models):
            return out
        time.sleep(1)
    raise AssertionError("the lab page never showed throughput for every model")


def check_figures(seen: Seen, w: Walk, metered: bool) -> None:
    """Per model: its share of the users, the ideal users / delay, throughput near it, p50 at
    least the delay, and (where a meter or a pid is known) the server's CPU and PSS."""
    per_model = w.users // len(w.models)
    for model in w.models:
        cells = seen.figures[model]
        ideal = per_model / (w.delay_ms / 1000)
        assert int(cells["users"]) == per_model and float(cells["ideal"]) == ideal, cells
        assert 0.3 * ideal < float(cells["rps"]) <= 1.2 * ideal, cells
        assert 0.95 * w.delay_ms <= float(cells["p50"]) < 10 * w.delay_ms, cells
        if metered:
            assert float(cells["cpu"]) > 0 and float(cells["pss"]) > 10, cells


def report(run_dir: Path) -> str:
    """`lab report` on a saved run: it must succeed; its output."""
    done = subprocess.run(
        [str(Path(sys.executable).parent / "lab"), "report", str(run_dir)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout
