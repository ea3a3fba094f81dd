"""The app's own environment (`lab run --app ... --app-requirements FILE`): a real app whose pins
differ from the lab's runs under its own versions in the import check, the setup commands and
every model, and a pin a model cannot live with is refused in one line naming both sides.

The app asserts Flask 3.0.3 as it imports (the lab runs Flask 3.1), so under the lab's own
environment its import check fails: a check that passes ran in the app's pins, not the lab's."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from lab.config import availability
from lab.config.models import load_registry
from lab.record.errors import EXIT_USAGE, LabError
from lab.run.manifest import model_entry
from lab.system import appvenv, interpreters
from tests.helpers import assert_clean_error, lab_cli

PINNED_APP = """
import importlib.metadata

from flask import Flask

FLASK = importlib.metadata.version("flask")
assert FLASK == "3.0.3", f"this app is tested with Flask 3.0.3, not {FLASK}"
app = Flask(__name__)


@app.get("/version")
def version():
    return {"flask": FLASK}
"""
PINS = "flask==3.0.3\nwerkzeug==3.0.6\n"  # a lock file's two lines: the lab has Flask 3.1
# --db-setup, run in the app's directory: which Flask its `python` has
SETUP = (
    "python -c \"import importlib.metadata as m; open('setup.txt', 'w').write(m.version('flask'))\""
)

# pip's own words (pip 26) for a pin against a model's requirement, and for a pin against what
# the model's package depends on (pip tried every gevent; two shown here)
DIRECT = """ERROR: Cannot install gunicorn<20 and gunicorn>=27.0 because these package versions \
have conflicting dependencies.

The conflict is caused by:
    The user requested gunicorn>=27.0
    The user requested gunicorn<20

To fix this you could try to:
"""
TRANSITIVE = """The conflict is caused by:
    The user requested greenlet==2.0.2
    gevent 26.9.0 depends on greenlet>=3.2.2; platform_python_implementation == "CPython"
    The user requested greenlet==2.0.2
    gevent 25.4.2 depends on greenlet>=3.2.0; platform_python_implementation == "CPython"
    flask 3.0.3 depends on Werkzeug>=3.0.0

ERROR: ResolutionImpossible: for help visit https://pip.pypa.io/...
"""


def app_dir(tmp_path: Path, pins: str = PINS) -> Path:
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / "pinned.py").write_text(PINNED_APP)
    (tmp_path / "requirements.txt").write_text(pins)
    return tmp_path


def check_only(where: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    argv = lab_cli(
        *("run", "--app", "pinned:app", "--app-dir", str(where), "--path", "/version"),
        *("--check-only", "--out", str(where / "out"), *extra),
    )
    return subprocess.run(argv, capture_output=True, text=True, timeout=600)


def test_a_pin_the_model_refuses_is_named_on_both_sides() -> None:
    assert appvenv.conflict(DIRECT, ("gunicorn>=27.0",)) == (["gunicorn>=27.0"], ["gunicorn<20"])
    model, app = appvenv.conflict(TRANSITIVE, ("gunicorn>=27.0", "gevent>=24.2")) or ([], [])
    assert model == ["greenlet>=3.2.2 (for gevent 26.9.0, and the 1 others pip tried)"]
    assert app == ["greenlet==2.0.2", "Werkzeug>=3.0.0 (for flask 3.0.3)"]
    said = appvenv.conflict_words("model gunicorn-gevent", "--app-requirements r.txt", model, app)
    assert said.startswith("model gunicorn-gevent needs greenlet>=3.2.2 (for gevent 26.9.0")
    assert "--app-requirements r.txt asks for greenlet==2.0.2" in said and "\n" not in said
    assert appvenv.conflict("ERROR: No matching distribution found for flask==99", ()) is None


def test_the_pins_digest_covers_the_files_they_include(tmp_path: Path) -> None:
    (tmp_path / "base.txt").write_text("flask==3.0.3\n")
    (tmp_path / "req.txt").write_text("-r base.txt\nwerkzeug==3.0.6\n")
    before = appvenv.from_requirements(tmp_path / "req.txt", "python3").sha256
    (tmp_path / "base.txt").write_text("flask==3.0.2\n")
    assert appvenv.from_requirements(tmp_path / "req.txt", "python3").sha256 != before
    with pytest.raises(LabError, match="--app-requirements .*nope.txt: no such file"):
        appvenv.from_requirements(tmp_path / "nope.txt", "python3")


def test_a_model_in_the_apps_venv_runs_and_is_recorded_there(tmp_path: Path) -> None:
    model = load_registry().models["gunicorn-gthread"]
    served = replace(model, venv=str(tmp_path))
    knobs = load_registry().knobs.resolve(1)
    assert served.command(knobs, "HOST", 0)[0] == str(tmp_path / "bin" / "gunicorn")
    assert availability.interpreter_of(served) == tmp_path / "bin" / "python"
    assert model_entry(served, knobs)["venv"] == str(tmp_path)
    assert "venv" not in model_entry(model, knobs)  # the lab's own environment: as before


def test_the_app_runs_under_its_own_pins_in_every_part_of_the_check(tmp_path: Path) -> None:
    """The import check, the setup command and both models run Flask 3.0.3 (the lab's own is
    3.1): appcheck.json names the pins' digest and each model's venv, whose Flask is 3.0.3."""
    where = app_dir(tmp_path)
    models = ("--models", "gunicorn-gthread,gunicorn-gevent", "--db-setup", SETUP)
    done = check_only(where, *models, "--app-requirements", str(where / "requirements.txt"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert (where / "setup.txt").read_text() == "3.0.3"
    (run,) = (where / "out").iterdir()
    check = json.loads((run / "appcheck.json").read_text())
    sha = hashlib.sha256(PINS.encode()).hexdigest()
    assert check["environment"]["sha256"] == sha
    venvs = {m["model"]: Path(m["venv"]) for m in check["models"]}
    assert set(venvs) == {"gunicorn-gthread", "gunicorn-gevent"} and len(set(venvs.values())) == 2
    for venv in (*venvs.values(), Path(check["environment"]["venv"])):
        assert venv.parent == interpreters.cache_root()
        version = "import importlib.metadata as m; print(m.version('flask'))"
        said = subprocess.run([venv / "bin" / "python", "-c", version], capture_output=True)
        assert said.stdout.decode().strip() == "3.0.3"
    assert all(not m["error"] for m in check["models"])


def test_under_the_labs_own_environment_the_app_fails_its_import(tmp_path: Path) -> None:
    """The control: without its pins the app meets the lab's Flask, and says so."""
    own = check_only(app_dir(tmp_path), "--models", "gunicorn-gthread")
    assert_clean_error(own, "tested with Flask 3.0.3, not 3.1", code=EXIT_USAGE)


def test_a_pin_a_model_cannot_live_with_is_one_line_before_anything_runs(tmp_path: Path) -> None:
    where = app_dir(tmp_path, PINS + "gunicorn<20\n")
    pins = ("--app-requirements", str(where / "requirements.txt"))
    done = check_only(where, "--models", "gunicorn-gthread", *pins)
    assert_clean_error(done, code=EXIT_USAGE)
    (error,) = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert "model gunicorn-gthread needs gunicorn>=" in error
    assert "requirements.txt asks for gunicorn<20: pip cannot install both" in error
    assert not (where / "out").exists()  # refused before any run directory


def test_an_existing_venv_is_the_apps_environment_as_it_stands(tmp_path: Path) -> None:
    """--app-venv: the import check runs in the user's venv itself, the model in one built from
    its `pip freeze` (the lock file written to the cache); the user's venv is not changed."""
    where = app_dir(tmp_path / "app")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [venv / "bin" / "python", "-m", "pip", "install", "-q", "-r", "requirements.txt"]
    subprocess.run(pip, cwd=where, check=True, capture_output=True)
    before = sorted(p.name for p in (venv / "lib").glob("*/site-packages/*"))
    done = check_only(where, "--models", "gunicorn-gthread", "--app-venv", str(venv))
    assert done.returncode == 0, done.stdout + done.stderr
    (run,) = (where / "out").iterdir()
    check = json.loads((run / "appcheck.json").read_text())
    assert check["environment"]["venv"] == str(venv.resolve())
    assert "Flask==3.0.3" in Path(check["environment"]["pins"]).read_text()
    assert Path(check["models"][0]["venv"]).parent == interpreters.cache_root()
    assert sorted(p.name for p in (venv / "lib").glob("*/site-packages/*")) == before
    both = check_only(where, "--app-venv", str(venv), "--app-requirements", "requirements.txt")
    assert_clean_error(both, "--app-requirements and --app-venv each give the app's environment")


def test_lab_routes_reads_the_apps_routes_in_its_own_environment(tmp_path: Path) -> None:
    """`lab routes` imports the app where the import check does: in the venv of its pins it
    lists the app's route; under the lab's own Flask the import fails, in one line."""
    where = app_dir(tmp_path)
    argv = ("routes", "--app", "pinned:app", "--app-dir", str(where))
    pins = ("--app-requirements", str(where / "requirements.txt"))
    done = subprocess.run(lab_cli(*argv, *pins), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert 'path = "/version"' in done.stdout
    own = subprocess.run(lab_cli(*argv), capture_output=True, text=True, timeout=120)
    assert_clean_error(own, code=EXIT_USAGE)
    (error,) = [line for line in own.stderr.splitlines() if line.strip()]
    assert error.startswith("error: --app pinned:app: cannot import it")
    assert "tested with Flask 3.0.3, not 3.1" in error
