"""Granian (WSGI, ASGI) and plain uvicorn serve the lab's tiny sweep, and missing servers skip."""

from __future__ import annotations

import json

import pytest

from lab.record.rundir import RunDir
from lab.record.step import flat
from tests.helpers import lab_run, module_run

NEW_MODELS = ["granian-wsgi", "granian-asgi", "uvicorn"]


run_dir = module_run(
    *["--models", ",".join(NEW_MODELS), "--levels", "1,4", "--duration", "2"],
    *["--warmup", "0", "--delay-ms", "50"],
)


@pytest.mark.parametrize("model", NEW_MODELS, ids=NEW_MODELS)
def test_new_model_serves_the_sweep_without_errors(run_dir, model):
    steps = [s for s in [flat(r) for r in RunDir(run_dir).steps()] if s["model"] == model]
    assert sorted(s["users"] for s in steps) == [1, 4]
    assert all(s["ok"] > 0 and not s["errors"] for s in steps), steps
    assert "serialized" not in {f for s in steps for f in s["flags"]}


def test_manifest_records_each_models_interpreter(run_dir):
    recorded = json.loads((run_dir / "manifest.json").read_text())["execution"]["interpreters"]
    assert set(recorded) == set(NEW_MODELS)
    assert all({"version", "gil_enabled", "executable"} <= set(i) for i in recorded.values())


def test_model_with_missing_package_is_skipped_with_the_reason(tmp_path):
    models = tmp_path / "models.toml"
    models.write_text(
        '[models.ghost]\ndescription = "d"\napp = "wsgi"\nunit = "thread"\n'
        'requires = ["no-such-server-dist"]\nargv = ["{bindir}/gunicorn", "--port", "{port}"]\n'
    )
    run, done = lab_run(
        tmp_path,
        *["--models-file", str(models), "--models", "ghost,gunicorn-gthread"],
        *["--levels", "1", "--duration", "1", "--warmup", "0"],
        timeout_s=120,
    )
    assert "skipping ghost: no-such-server-dist not installed" in " ".join(done.stderr.split())
    assert {s["model"] for s in [flat(r) for r in RunDir(run).steps()]} == {"gunicorn-gthread"}
