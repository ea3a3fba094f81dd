"""A model runs under another interpreter, in a venv the lab makes, and the manifest says so."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from lab.record.rundir import RunDir
from lab.record.step import flat
from lab.system import interpreters
from tests.helpers import lab_run

SYSTEM_PYTHON = shutil.which("python3", path="/usr/bin:/usr/local/bin")


@pytest.mark.skipif(SYSTEM_PYTHON is None, reason="no system python3 to override with")
def test_python_override_is_honoured_and_recorded(tmp_path):
    run, _ = lab_run(
        tmp_path,
        *["--models", "gunicorn-gthread", "--python", str(SYSTEM_PYTHON)],
        *["--levels", "1", "--duration", "1", "--warmup", "0"],
        timeout_s=600,
    )
    manifest = json.loads((run / "manifest.json").read_text())
    info = manifest["execution"]["interpreters"]["gunicorn-gthread"]
    venv = Path(info["executable"]).parent.parent
    assert venv.parent == interpreters.cache_root()
    assert f"home = {Path(SYSTEM_PYTHON).resolve().parent}" in (venv / "pyvenv.cfg").read_text()
    assert manifest["models"]["gunicorn-gthread"]["argv"][0] == str(venv / "bin" / "gunicorn")
    assert info["version"] == interpreters.probe(SYSTEM_PYTHON)["version"]
    assert info["gil_enabled"] is True  # a regular build; a 3.13t/3.14t build records False
    assert all(s["ok"] > 0 for s in [flat(r) for r in RunDir(run).steps()])


FREE_THREADED = {"version": "3.14.0", "free_threaded_build": True, "gil_enabled": False}
CASES = [
    (("gunicorn", "gevent"), ["gevent re-enables the GIL"]),
    (("uwsgi",), ["uWSGI"]),
    (("granian",), []),
]


@pytest.mark.parametrize(("requires", "said"), CASES, ids=["gevent", "uwsgi", "granian"])
def test_free_threaded_build_refuses_packages_that_need_the_gil(requires, said):
    blockers = interpreters.free_threading_blockers(FREE_THREADED, requires)
    assert len(blockers) == len(said)
    assert all(s in b for s, b in zip(said, blockers, strict=True))
    assert not interpreters.free_threading_blockers({"free_threaded_build": False}, requires)


def test_requirements_take_the_projects_versions():
    reqs = interpreters.requirements("asgi", ("uvicorn", "granian"))
    assert reqs[0].startswith("quart") and "uvicorn[standard]>=" in reqs[2]
    assert any(r.startswith("granian>=") for r in reqs)
