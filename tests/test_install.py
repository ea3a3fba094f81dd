"""The lab installs from a wheel and runs from anywhere: a real wheel, a fresh venv, a real sweep.

Why: a checkout hides mistakes an installed lab would show (data files found next to the source,
packages importable only from the working directory). This builds the wheel from the tree,
installs it into a new venv, runs a one-step sweep from a directory outside the tree and reads
its report. The dependencies come from a wheelhouse built once per dependency list (from pip's
cache, so uWSGI compiles once) and kept in ~/.cache, so a later run installs without the index.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.helpers import step_rows

ROOT = Path(__file__).resolve().parent.parent
GENERIC_NAMES = ("lab", "servers", "loadgen", "analysis", "experiments", "tuning", "benchmarks")


def pip(python: Path | str, *args: str, timeout: float = 600) -> str:
    """Run pip quietly; what it still printed (warnings) is returned."""
    argv = [str(python), "-m", "pip", "--disable-pip-version-check", "-q", *args]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # only what pip installs
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout + done.stderr


def wheelhouse(project_wheel: Path) -> Path:
    """Wheels of every dependency, built once per dependency list (kept in the user's cache)."""
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    key = hashlib.sha256(json.dumps([sys.version, deps]).encode()).hexdigest()[:16]
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    house = cache / "concurrency-lab" / "wheelhouse" / key
    if not (house / "complete").exists():
        pip(sys.executable, "wheel", "-w", str(house), str(project_wheel), timeout=1200)
        (house / "complete").write_text("\n".join(deps))
    # The house holds dependencies only: a project wheel left there (same name and version) would
    # be installed instead of the one just built from this tree.
    for stale in house.glob("concurrency_lab-*.whl"):
        stale.unlink()
    return house


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bin directory of a fresh venv with the lab installed from a wheel of this tree."""
    base = tmp_path_factory.mktemp("install")
    dist = base / "dist"
    # setuptools reuses build/lib: a module removed from the tree would still be packaged from it
    shutil.rmtree(ROOT / "build", ignore_errors=True)
    said = pip(
        sys.executable, "wheel", "--no-deps", "--no-build-isolation", "-w", str(dist), str(ROOT)
    )
    assert "Warning" not in said, f"building the wheel warned:\n{said[-3000:]}"
    (project_wheel,) = dist.glob("concurrency_lab-*.whl")
    house = wheelhouse(project_wheel)
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    pip(
        venv / "bin" / "python",
        "install",
        "--no-index",
        "--find-links",
        str(house),
        str(project_wheel),
    )
    return venv / "bin"


def test_every_folder_of_the_lab_is_packaged() -> None:
    """A folder of code or data missing from pyproject's `packages` is left out of the wheel (and
    setuptools warns): every one must be listed, under the private `concurrency_lab.lib`."""
    listed = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    folders = {
        "concurrency_lab.lib." + ".".join(path.parent.relative_to(ROOT).parts)
        for top in GENERIC_NAMES
        if top != "benchmarks"
        for path in (ROOT / top).rglob("*")
        if path.is_file()
        and path.suffix in {".py", ".toml", ".conf", ".html"}
        and "__pycache__" not in path.parts
    }
    assert folders <= listed, f"add to [tool.setuptools] packages: {sorted(folders - listed)}"


def site_packages(bin_dir: Path) -> Path:
    code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    return Path(subprocess.check_output([str(bin_dir / "python"), "-c", code], text=True).strip())


def test_no_generic_top_level_names(installed: Path) -> None:
    site = site_packages(installed)
    lib = site / "concurrency_lab" / "lib"
    assert (lib / "lab" / "cli" / "main.py").is_file()
    assert (lib / "lab" / "webui" / "templates" / "lab.html").is_file()
    assert not [name for name in GENERIC_NAMES if (site / name).exists()]
    outside = subprocess.run(
        [str(installed / "python"), "-c", "import lab"], capture_output=True, cwd="/", timeout=60
    )
    assert outside.returncode != 0, "`lab` must not be importable from the venv's own Python"


def test_quick_sweep_from_another_directory(installed: Path, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{installed}{os.pathsep}{env.get('PATH', '')}"
    argv = [
        *[str(installed / "lab"), "run", "--models", "gunicorn-asyncio", "--levels", "2"],
        *["--duration", "1", "--warmup", "0", "--trials", "1", "--delay-ms", "20"],
        *["--out", str(tmp_path / "results")],
    ]
    done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    (run_dir,) = (tmp_path / "results").iterdir()
    assert (run_dir / "manifest.json").is_file()
    steps = step_rows(run_dir)
    assert [(s["model"], s["users"]) for s in steps] == [("gunicorn-asyncio", 2)]
    assert steps[0]["ok"] > 0 and not steps[0]["errors"]
    report = subprocess.run(
        [str(installed / "lab"), "report", str(run_dir)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert report.returncode == 0, report.stdout[-2000:] + report.stderr[-2000:]
    assert (run_dir / "report.html").stat().st_size > 1000


def test_quickstart_reports_the_run_it_made(tmp_path: Path) -> None:
    """scripts/quickstart.sh with --out reports the run directory its sweep made there, not the
    newest one under results/ (which another run may have written)."""
    args = ("--models", "gunicorn-gevent", "--levels", "1", "--duration", "1", "--warmup", "0")
    done = subprocess.run(
        ["bash", "scripts/quickstart.sh", *args, "--out", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    (made,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    assert f"report: {made / 'report.html'}" in done.stdout, done.stdout[-2000:]
