"""Which Python runs a model: the lab's own, or another interpreter with a venv the lab makes.

Why: the server choice depends on the interpreter (a free-threaded 3.14t build may free a plain
threads model from the GIL), so a model can run under `--python PATH` or its `python` field. The
lab then makes a venv for that interpreter with exactly the model's packages, cached under
LAB_CACHE_DIR (default ~/.cache/concurrency-lab/venvs), keyed by the interpreter binary and the
requirement list, so a second run reuses it. What ran is recorded: version and GIL state.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import tomllib
from functools import cache
from pathlib import Path
from typing import Any

from lab.record.errors import LabError

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"
APP_PACKAGES = {"wsgi": ("flask", "urllib3"), "asgi": ("quart", "aiohttp")}
INSTALL_TIMEOUT_S = 900
READY_STAMP = ".lab-ready"

# What a free-threaded interpreter cannot give a model that needs these packages, and why.
FREE_THREADED_BLOCKERS = {
    "gevent": "gevent re-enables the GIL on free-threaded builds (its C extensions are not "
    "marked free-threading safe), so the model would silently measure a GIL build",
    "uwsgi": "uWSGI does not build against free-threaded CPython (its embedded interpreter "
    "assumes the GIL)",
}

# Runs inside the target interpreter: what it is, and which of argv's distributions it lacks.
PROBE = """
import importlib.metadata as md, json, sys, sysconfig
def has(name):
    try:
        md.version(name)
        return True
    except md.PackageNotFoundError:
        return False
gil = getattr(sys, "_is_gil_enabled", None)
print(json.dumps({
    "executable": sys.executable,
    "version": sys.version.split()[0],
    "implementation": sys.implementation.name,
    "free_threaded_build": bool(sysconfig.get_config_var("Py_GIL_DISABLED")),
    "gil_enabled": gil() if gil else True,
    "missing": [n for n in sys.argv[1:] if not has(n)],
}))
"""


def dist_name(spec: str) -> str:
    """The normalised distribution name of a requirement: 'uvicorn[standard]>=0.30' -> uvicorn."""
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", spec)
    if match is None:
        raise LabError(f"not a requirement: {spec!r}")
    return re.sub(r"[-_.]+", "-", match.group(1)).lower()


@cache
def _declared() -> dict[str, str]:
    """The project's own requirement specs by name, so a lab venv gets the versions we test."""
    deps = tomllib.loads(PYPROJECT.read_text())["project"]["dependencies"]
    return {dist_name(spec): spec for spec in deps}


def requirements(app: str, requires: tuple[str, ...]) -> tuple[str, ...]:
    """The pinned specs a model needs: its app's packages plus its server's."""
    return pinned((*APP_PACKAGES[app], *requires))


def pinned(names: tuple[str, ...]) -> tuple[str, ...]:
    """Each distribution once, at the versions pyproject.toml asks for (a name it does not list
    as is)."""
    return tuple(_declared().get(name, name) for name in dict.fromkeys(map(dist_name, names)))


def cache_root() -> Path:
    default = Path.home() / ".cache" / "concurrency-lab" / "venvs"
    return Path(os.environ.get("LAB_CACHE_DIR", default))


def venv_dir(python: str, reqs: tuple[str, ...]) -> Path:
    """Where the lab's venv for this interpreter and these requirements lives (not made here)."""
    real = Path(python).resolve()
    try:
        stamp = real.stat().st_mtime_ns  # a rebuilt interpreter gets a fresh venv
    except OSError:
        raise LabError(f"--python {python}: no such interpreter") from None
    key = hashlib.sha256(f"{real}\n{stamp}\n{chr(10).join(sorted(reqs))}".encode()).hexdigest()
    return cache_root() / f"{real.name}-{key[:16]}"


class InstallFailed(LabError):
    """venv or pip exited non-zero: the message says its last line, `output` keeps all of it,
    so a caller can name the cause (lab.system.appvenv reads pip's conflicts from it)."""

    def __init__(self, message: str, output: str) -> None:
        super().__init__(message)
        self.output = output


def ensure_venv(python: str, reqs: tuple[str, ...], args: tuple[str, ...] | None = None) -> Path:
    """Make (once) the venv for python with reqs installed (`args`: pip install's arguments, when
    they are not reqs themselves, e.g. `-r FILE`); return its bin directory."""
    where = venv_dir(python, reqs)
    if (where / READY_STAMP).exists():
        return where / "bin"
    _run([python, "-m", "venv", "--clear", str(where)], f"{python} -m venv")
    pip = [str(where / "bin" / "python"), "-m", "pip", "install"]
    given = ("-q", *reqs) if args is None else args
    said = f"pip install {' '.join(reqs if args is None else args)} for {python}"
    _run([*pip, "--disable-pip-version-check", *given], said)
    (where / READY_STAMP).write_text(json.dumps(list(reqs)) + "\n")
    return where / "bin"


def _run(argv: list[str], what: str) -> None:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise LabError(f"{what} failed: {e}") from None
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise InstallFailed(f"{what} failed: {tail[0]}", done.stdout + done.stderr)


def probe(python: str | Path, dists: tuple[str, ...] = ()) -> dict[str, Any]:
    """Version, GIL state and missing distributions of an interpreter, asked by running it."""
    try:
        done = subprocess.run(
            [str(python), "-c", PROBE, *dists], capture_output=True, text=True, timeout=60
        )
        return dict(json.loads(done.stdout))
    except (OSError, ValueError, subprocess.TimeoutExpired) as e:
        raise LabError(f"cannot run interpreter {python}: {e}") from None


def interpreter_info(python: str | Path) -> dict[str, Any]:
    """What the manifest records per model: the interpreter, its version and GIL state.

    `gil_enabled` is `sys._is_gil_enabled()` where it exists (3.13+), else True.
    """
    info = probe(python)
    info.pop("missing")
    return info


def free_threading_blockers(info: dict[str, Any], requires: tuple[str, ...]) -> list[str]:
    """Why a model's packages cannot run free-threaded on this interpreter (empty: they can)."""
    if not info.get("free_threaded_build"):
        return []
    names = [dist_name(n) for n in requires]
    return [FREE_THREADED_BLOCKERS[n] for n in names if n in FREE_THREADED_BLOCKERS]


def own_bindir() -> Path:
    return Path(sys.executable).parent
