"""The report: every plot written, the HTML self-contained, and rendered by headless Chromium."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import matplotlib.image
import pytest
from click.testing import CliRunner
from fixture_run import FixtureStep, build_run

from analysis.report import write_report
from lab.cli.report import report

PLOTS = ("throughput", "latency", "spectrum", "errors", "resources")
MODELS = ("uwsgi-gevent", "uwsgi-threads", "gunicorn-asyncio")
CHROMIUM = next((p for p in map(shutil.which, ("chromium", "chromium-browser")) if p), None)
# network off for the browser: every non-local fetch goes to a proxy port nobody listens on
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
    "--proxy-server=127.0.0.1:9",
)
IMG_CHECK = (
    "<script>addEventListener('load',()=>{const i=[...document.images];"
    "document.title='IMGCHECK '+i.length+' '+"
    "i.filter(x=>!(x.complete&&x.naturalWidth>0)).length;});</script>"
)


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> Path:
    """Three models, three levels, two trials; one serialized, one client-saturated, errors."""
    steps = [
        FixtureStep(
            model,
            conc,
            trial,
            (conc * 9.0 + trial,) * 3,
            tuple(100.0 + i * conc / 10 for i in range(20)),
            server_cpu_pct=min(100.0, conc * 0.8),
            server_rss_mb=50.0 + conc * (0.1 if "gevent" in model else 0.5),
            client_cpu_pct=95.0 if conc == 100 else 30.0,
            errors={"timeout": 2} if (model, conc) == ("uwsgi-threads", 100) else {},
            flags=("client_saturated",) if conc == 100 else (),
        )
        for model in MODELS
        for conc in (1, 10, 100)
        for trial in (1, 2)
    ]
    run = build_run(
        tmp_path_factory.mktemp("report") / "run",
        steps,
        preflight={"gunicorn-asyncio": {"serialized": True, "message": "5 x 100 ms took 0.5 s"}},
    )
    result = CliRunner().invoke(report, [str(run)])
    assert result.exit_code == 0, result.output
    assert f"report: {run / 'report.html'}" in result.output
    return run


def test_every_plot_written_as_png_and_svg(rendered: Path) -> None:
    names = [*PLOTS, *(f"timeseries-{m}" for m in MODELS)]
    for name in names:
        assert (rendered / "report" / f"{name}.png").stat().st_size > 1000
        assert (rendered / "report" / f"{name}.svg").stat().st_size > 1000
    assert (rendered / "summary.csv").exists() and (rendered / "summary.parquet").exists()


def test_html_is_self_contained_and_marks_flags(rendered: Path) -> None:
    page = (rendered / "report.html").read_text()
    sources = re.findall(r"""(?:src|href)=['"]([^'"]+)""", page)
    assert sources and all(s.startswith("data:image/png;base64,") for s in sources)
    assert "http://" not in page and "https://" not in page
    assert "Excluded from the verdict (not a fair result): gunicorn-asyncio" in page
    assert "client_saturated" in page and "serialized" in page
    assert page.count("<img") == len(PLOTS) + len(MODELS)


def test_report_of_a_run_in_progress(tmp_path: Path) -> None:
    run = build_run(tmp_path, [FixtureStep("m", 1)])
    (run / "manifest.json").write_text(
        (run / "manifest.json").read_text().replace("complete", "running")
    )
    page = write_report(run).read_text()
    assert "Run status: running" in page


def _chromium(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [CHROMIUM, *CHROMIUM_FLAGS, *args], capture_output=True, text=True, timeout=90, check=False
    )


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium binary (apt-get install -y chromium)")
def test_chromium_renders_every_image(rendered: Path, tmp_path: Path) -> None:
    page = (rendered / "report.html").read_text()
    probe = tmp_path / "probe.html"
    probe.write_text(page.replace("</body>", IMG_CHECK + "</body>"))
    dom = _chromium("--virtual-time-budget=10000", "--dump-dom", probe.as_uri())
    title = re.search(r"<title>IMGCHECK (\d+) (\d+)</title>", dom.stdout)
    assert title, f"chromium did not run the check: {dom.stderr[-2000:]}"
    assert int(title.group(1)) == len(PLOTS) + len(MODELS)
    assert int(title.group(2)) == 0, "some <img> did not decode (naturalWidth 0)"
    shot = tmp_path / "shot.png"
    _chromium(
        "--window-size=1280,2000", f"--screenshot={shot}", (rendered / "report.html").as_uri()
    )
    pixels = matplotlib.image.imread(shot)
    assert pixels.shape[:2] == (2000, 1280)
    assert pixels.std() > 0.05, "the screenshot is blank"
