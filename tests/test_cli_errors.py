"""Bad input gets a clear error that says what to fix, a non-zero exit, and never a traceback."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from lab.record.errors import EXIT_REFUSED
from tests.helpers import assert_clean_error, run_lab


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


def one_line_error(done: subprocess.CompletedProcess[str], *needles: str) -> None:
    """A usage error: exit 2, one line (the docs promise one), no traceback, naming `needles`."""
    assert_clean_error(done, *needles)
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert len(lines) == 1, lines


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["run", "--bogus"], ["No such option '--bogus'", "--help"]),
        (["run", "--levels"], ["'--levels' requires an argument"]),
        (["plan"], ["Missing option '--detect'"]),
        (["plan", "--detect", "0.1"], ["--detect", "1% to 100%", "0.1 is not read as 10%"]),
        (["plan", "--detect", "999%"], ["--detect", "1% to 100%"]),
    ],
    ids=["unknown-option", "missing-value", "missing-option", "detect-share", "detect-too-big"],
)
def test_usage_errors_are_one_line(args: list[str], needles: list[str]) -> None:
    """click's usage errors ran 3-6 lines (usage, a hint, a blank, the error); the docs
    promise one line that says what is wrong and where to look."""
    one_line_error(run_lab(*args), *needles)


def test_a_file_or_directory_where_the_other_is_expected_says_which(tmp_path):
    """A plain file given to `lab compare` was "no such run directory"; a directory given as
    `--mix` is named a directory, not missing."""
    (tmp_path / "manifest.json").write_text("{}")
    done = run_lab("compare", str(tmp_path / "manifest.json"), str(tmp_path))
    one_line_error(done, "is a file, not a run directory")
    mix = run_lab("run", "--app", "servers.app_wsgi:app", "--mix", str(tmp_path))
    one_line_error(mix, "--mix", "is a directory")


def test_report_of_a_level_the_run_lacks_lists_its_levels(tmp_path):
    """`lab report RUN --level 7` (no such level) exited 0 in silence."""
    from tests.fixture_run import FixtureStep, build_run

    run = build_run(tmp_path / "r", [FixtureStep("m", 5, 1, (100.0,) * 3)])
    done = run_lab("report", str(run), "--level", "7")
    assert_clean_error(done, "--level 7", "no such level", "its levels: 5")


@pytest.mark.parametrize(
    "args",
    [["--rates", "20"], ["--max-outstanding", "5"], ["--arrival", "poisson"]],
    ids=["rates", "max-outstanding", "arrival"],
)
def test_open_loop_options_in_a_closed_loop_run_are_refused(args: list[str], tmp_path):
    """`lab run --models uwsgi-threads --rates 20` without `--mode open` once ran the quick
    scenario's closed levels instead, without a word: now one line naming the option and the
    fix, before anything is started or written."""
    done = run_lab("run", "--models", "uwsgi-threads", *args, "--out", str(tmp_path / "out"))
    one_line_error(done, args[0], "open loop only", "--mode open")
    assert not (tmp_path / "out").exists()


def test_levels_in_an_open_loop_run_are_refused(tmp_path):
    """`--levels` is the closed loop's; an open-loop run steps through --rates and ignored it."""
    args = ("--mode", "open", "--rates", "20", "--levels", "5")
    done = run_lab("run", "--models", "uwsgi-threads", *args, "--out", str(tmp_path / "out"))
    one_line_error(done, "--levels: closed loop only", "open loop", "--rates are the steps")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--port", "70000"], "--port: must be 0-65535, got 70000"),
        (["--duration", "100000"], "--duration: must be above 0 and at most 86400"),
        (["--trials", "101"], "--trials: must be above 0 and at most 100"),
        (["--delay-ms", "1e9"], "--delay-ms: must be between 0 and 600000"),
        (["--upstream-port", "-1"], "--upstream-port: must be 0-65535"),
    ],
    ids=["port", "duration", "trials", "delay", "upstream-port"],
)
def test_range_errors_name_the_option_typed(args: list[str], said: str, tmp_path):
    """Errors once named the scenario's keys ("scenario quick: duration_s", "server_port must
    be 0-65535"), and a positive setting's ceiling said "between 0 and 100" while 0 was refused
    as "must be positive": now the option typed, and one range that excludes 0."""
    done = run_lab("run", *args, "--out", str(tmp_path))
    one_line_error(done, said)
    output = done.stdout + done.stderr
    assert "scenario quick" not in output and "_s:" not in output and "server_port" not in output


def test_advise_help_speaks_of_what_advise_has():
    """`lab advise` has no --scenario and no levels: its help once gave "the scenario's"
    defaults and seconds "per level" (the options were `lab run`'s, shared)."""
    done = run_lab("advise", "--help")
    text = " ".join(done.stdout.split())
    assert done.returncode == 0, done.stderr
    assert "[default: the scenario's" not in text and "per level" not in text, text
    assert "Seconds measured per step" in text and "[default: the quick scenario's]" in text
