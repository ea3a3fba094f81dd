"""Bad input gets a clear error that says what to fix, a non-zero exit, and never a traceback."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from lab.record.errors import EXIT_REFUSED, EXIT_USAGE
from tests.conftest import lab_cli


def run_lab(*args: str, cwd=None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(lab_cli(*args), capture_output=True, text=True, timeout=60, cwd=cwd)


def assert_clean_error(
    done: subprocess.CompletedProcess[str], *needles: str, code: int = EXIT_USAGE
) -> None:
    output = done.stdout + done.stderr
    assert done.returncode == code, output
    assert "Traceback" not in output
    for needle in needles:
        assert needle in output, output


@pytest.fixture()
def toml_file(tmp_path):
    def write(text: str, name: str = "file.toml"):
        path = tmp_path / name
        path.write_text(text)
        return str(path)

    return write


def test_unknown_model_lists_known_ones(tmp_path):
    done = run_lab("run", "--models", "nginx-unit", "--out", str(tmp_path))
    assert_clean_error(done, "unknown model nginx-unit", "uwsgi-threads", "gunicorn-asyncio")


def test_malformed_scenario_toml_names_file_and_line(toml_file, tmp_path):
    path = toml_file('description = "x"\n\nlevels = = [1, 2]\n', "broken.toml")
    done = run_lab("run", "--scenario", path, "--out", str(tmp_path))
    assert_clean_error(done, "broken.toml", "malformed TOML", "line 3")


def test_malformed_models_file(toml_file, tmp_path):
    path = toml_file("[models.x]\nargv = [\n", "models.toml")
    done = run_lab("run", "--models-file", path, "--out", str(tmp_path))
    assert_clean_error(done, "models.toml", "malformed TOML")


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--levels", "0,10"], "positive"),
        (["--levels", "-5"], "positive"),
        (["--levels", "ten"], "whole numbers"),
        (["--duration", "0"], "must be positive"),
        (["--duration", "-3"], "must be positive"),
        (["--trials", "0"], "must be positive"),
        (["--knob", "workers"], "NAME=VALUE"),
        (["--knob", "concurrency=-1"], "must be positive"),
        (["--knob", "colour=3"], "unknown key 'colour'"),
    ],
    ids=[
        "zero-level",
        "negative-level",
        "word-level",
        "zero-duration",
        "negative-duration",
        "zero-trials",
        "knob-no-value",
        "negative-knob",
        "unknown-knob",
    ],
)
def test_non_positive_or_malformed_values(args, needle, tmp_path):
    assert_clean_error(run_lab("run", *args, "--out", str(tmp_path)), needle)


def test_scenario_with_non_positive_duration(toml_file, tmp_path):
    path = toml_file("duration_s = 0\n", "zero.toml")
    assert_clean_error(run_lab("run", "--scenario", path, "--out", str(tmp_path)), "duration_s")


def test_scenario_unknown_key(toml_file, tmp_path):
    path = toml_file("durations = 5\n", "typo.toml")
    done = run_lab("run", "--scenario", path, "--out", str(tmp_path))
    assert_clean_error(done, "typo.toml", "unknown key 'durations'")


def test_port_in_use_names_the_port(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = run_lab(
            "run",
            "--models",
            "gunicorn-gevent",
            "--levels",
            "1",
            "--duration",
            "1",
            "--port",
            str(port),
            "--out",
            str(tmp_path),
        )
    assert_clean_error(done, f"port {port}", "already in use", code=EXIT_REFUSED)


def test_missing_server_binary_says_how_to_install(toml_file, tmp_path):
    path = toml_file(
        '[models.ghost]\ndescription = "d"\napp = "wsgi"\nunit = "thread"\n'
        'argv = ["{bindir}/no-such-server", "--port", "{port}"]\n'
    )
    done = run_lab("run", "--models-file", path, "--models", "ghost", "--out", str(tmp_path))
    assert_clean_error(done, "no-such-server not found", "install")


def test_level_above_open_file_limit_says_what_to_raise(tmp_path):
    done = run_lab(
        "run",
        "--models",
        "gunicorn-gevent",
        "--levels",
        "900000",
        "--knob",
        "concurrency=10",
        "--out",
        str(tmp_path),
    )
    assert_clean_error(done, "open files", "ulimit -n", code=EXIT_REFUSED)


def test_unknown_scenario_lists_built_ins(tmp_path):
    done = run_lab("run", "--scenario", "huge", "--out", str(tmp_path))
    assert_clean_error(done, "unknown scenario 'huge'", "quick", "standard")


@pytest.mark.parametrize(
    "args",
    [["--path", "/orders"], ["--check-only"], ["--header", "X-Token: t", "--body", "{}"]],
    ids=["path", "check-only", "header-body"],
)
def test_app_options_without_app_are_refused(args, tmp_path):
    done = run_lab("run", *args, "--out", str(tmp_path / "out"))
    assert_clean_error(done, "only with --app")
    assert not (tmp_path / "out").exists()


def test_lab_serve_binds_loopback_unless_allowed_remote():
    """`lab serve` (the container entry point) listens on 127.0.0.1 by default, like every
    listener the lab starts; another address needs --allow-remote, as compose.yaml gives it."""
    done = run_lab("serve", "uwsgi-threads", "--host", "0.0.0.0")
    assert_clean_error(done, "not a loopback address", "--allow-remote")
    module = [sys.executable, "-m", "lab.cli.serve", "uwsgi-threads", "--host", "0.0.0.0"]
    as_in_compose = subprocess.run(module, capture_output=True, text=True, timeout=60)
    assert_clean_error(as_in_compose, "not a loopback address", "--allow-remote")
