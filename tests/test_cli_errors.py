"""Bad input gets a clear error that says what to fix, a non-zero exit, and never a traceback."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Callable

import pytest

from lab.config import mixfile, userapp
from lab.record import exits
from lab.record.errors import EXIT_REFUSED, LabError
from tests.fixture_run import FixtureStep, build_run
from tests.helpers import assert_clean_error, run_lab
from tests.inprocess import Said, lab_here, one_line_error


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


# Issue 55's findings, each provoked in this process (tests/inprocess.py): every one is refused
# before anything starts, so none of them needs the process tier.


@pytest.fixture()
def lab(monkeypatch: pytest.MonkeyPatch) -> Callable[..., Said]:
    """`lab ARGS` in this process (`lab run`'s sweep a stub that fails the test if reached)."""
    return lambda *args: lab_here(monkeypatch, *args)


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["run", "--bogus"], ["No such option '--bogus'", "--help"]),
        (["run", "--levels"], ["'--levels' requires an argument"]),
        (["plan"], ["Missing option '--detect'"]),
        (["plan", "--detect", "0.1"], ["--detect", "1% to 100%", "0.1 is not read as 10%"]),
        (["plan", "--detect", "999%"], ["--detect", "1% to 100%"]),
        (["serve", "uwsgi-threads", "--front", "bare,nginx"], ["--front", "'bare,nginx'"]),
    ],
    ids=[
        "unknown-option",
        "missing-value",
        "missing-option",
        "detect-share",
        "detect-too-big",
        "serve-one-front",
    ],
)
def test_usage_errors_are_one_line(lab, args: list[str], needles: list[str]) -> None:
    """click's usage errors ran 3-6 lines (usage, a hint, a blank, the error); the docs
    promise one line that says what is wrong and where to look. `lab plan --detect 0.1` once
    planned a "0%" change and 999% was accepted."""
    one_line_error(lab(*args), *needles)


def test_a_file_or_directory_where_the_other_is_expected_says_which(lab, tmp_path):
    """A plain file given to `lab compare` was "no such run directory"; a directory given as
    `--mix` is named a directory, not missing."""
    (tmp_path / "manifest.json").write_text("{}")
    said = lab("compare", str(tmp_path / "manifest.json"), str(tmp_path))
    one_line_error(said, "is a file, not a run directory")
    mix = lab("run", "--app", "servers.app_wsgi:app", "--mix", str(tmp_path))
    one_line_error(mix, "--mix", "is a directory")


def test_report_of_a_level_the_run_lacks_lists_its_levels(lab, tmp_path):
    """`lab report RUN --level 7` (no such level) exited 0 in silence."""
    run = build_run(tmp_path / "r", [FixtureStep("m", 5, 1, (100.0,) * 3)])
    one_line_error(lab("report", str(run), "--level", "7"), "--level 7", "its levels: 5")


def test_compare_of_nothing_in_common_is_no_answer(lab, tmp_path):
    """`lab compare A B`, A a manifest and an empty steps file, exited 0 ("nothing changed
    beyond noise"), so a CI gate passed without comparing anything: now 1, no answer."""
    a = build_run(tmp_path / "a", [FixtureStep("m", 5, 1, (100.0,) * 3)])
    (a / "steps.jsonl").write_text("")
    b = build_run(tmp_path / "b", [FixtureStep("m", 5, 1, (100.0,) * 3)])
    said = lab("compare", str(a), str(b))
    assert said.code == exits.NO_ANSWER, said
    errors = [line for line in said.err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "nothing was compared" in errors[0], said.err


@pytest.mark.parametrize(
    "args",
    [["--rates", "20"], ["--max-outstanding", "5"], ["--arrival", "poisson"]],
    ids=["rates", "max-outstanding", "arrival"],
)
def test_open_loop_options_in_a_closed_loop_run_are_refused(lab, args: list[str], tmp_path):
    """`lab run --models uwsgi-threads --rates 20` without `--mode open` once ran the quick
    scenario's closed levels instead, without a word: now one line naming the option and the
    fix, before anything is started or written."""
    said = lab("run", "--models", "uwsgi-threads", *args, "--out", str(tmp_path / "out"))
    one_line_error(said, args[0], "open loop only", "--mode open")
    assert not (tmp_path / "out").exists()


def test_levels_in_an_open_loop_run_are_refused(lab, tmp_path):
    """`--levels` is the closed loop's; an open-loop run steps through --rates and ignored it."""
    args = ("--mode", "open", "--rates", "20", "--levels", "5")
    said = lab("run", "--models", "uwsgi-threads", *args, "--out", str(tmp_path / "out"))
    one_line_error(said, "--levels: closed loop only", "open loop", "--rates are the steps")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--port", "70000"], "--port: must be 0-65535, got 70000"),
        (["--duration", "100000"], "--duration: must be above 0 and at most 86400"),
        (["--trials", "101"], "--trials: must be above 0 and at most 100"),
        (["--delay-ms", "1e9"], "--delay-ms: must be between 0 and 600000"),
        (["--upstream-port", "-1"], "--upstream-port: must be 0-65535"),
        (["--mode", "open"], "--mode open needs --rates, e.g. --rates 50,100,200"),
        (["--models", ","], "--models: no models to run"),
        (["--upstream-route", "bogus"], "--upstream-route 'bogus': expected"),
    ],
    ids=[
        "port",
        "duration",
        "trials",
        "delay",
        "upstream-port",
        "open-no-rates",
        "no-models",
        "route",
    ],
)
def test_range_errors_name_the_option_typed(lab, args: list[str], said: str, tmp_path):
    """Errors once named the scenario's keys ("scenario quick: duration_s", "server_port must
    be 0-65535", "open mode needs rates = [...]", "upstream.routes"), and a positive setting's
    ceiling said "between 0 and 100" while 0 was refused as "must be positive": now the option
    typed, and one range that excludes 0."""
    done = lab("run", *args, "--out", str(tmp_path))
    one_line_error(done, said)
    assert "scenario quick" not in done.err and "_s:" not in done.err
    assert "server_port" not in done.err and "upstream." not in done.err


def test_advise_names_the_route_option_typed(lab, tmp_path):
    """`lab advise --upstream-route` is checked by the same scenario code as `lab run`'s."""
    args = ("--rps", "10", "--p99-ms", "100", "--upstream-route", "bogus", "--out", str(tmp_path))
    one_line_error(lab("advise", *args), "--upstream-route 'bogus': expected")


@pytest.mark.parametrize(
    ("path", "needle"),
    [
        ("/x/{orderId}", "unknown placeholder {orderId}"),
        ("/x/{order-id}", "unknown placeholder {order-id}"),
        ("/x/{UUID}", "placeholders are lowercase: {uuid}"),
        ("/x/{uuid", "never closes"),
    ],
    ids=["camel", "dashed", "upper", "unclosed"],
)
def test_a_path_with_an_unknown_placeholder_is_refused(path: str, needle: str) -> None:
    """`/x/{orderId}`, `{order-id}`, `{UUID}` and an unclosed `{uuid` were sent literally; the
    docs promise that any other `{word}` is refused, naming where it was given."""
    with pytest.raises(LabError, match="--path") as refused:
        userapp.parse_routes((f"GET {path}",), None, ())
    assert needle in str(refused.value)


def test_a_mix_file_reads_its_files_beside_it(tmp_path, monkeypatch) -> None:
    """`body_file` was read relative to the mix file, `{line:FILE}` relative to the current
    directory: both are the mix file's now, wherever `lab run` runs."""
    home = tmp_path / "traffic"
    home.mkdir()
    (home / "ids.txt").write_text("7\n")
    (home / "body.json").write_text('{"id": "{line:ids.txt}"}')
    (home / "mix.toml").write_text(
        '[[route]]\npath = "/items/{line:ids.txt}"\n'
        '[[route]]\nmethod = "POST"\npath = "/orders"\nbody_file = "body.json"\n'
    )
    monkeypatch.chdir(tmp_path)  # neither file is here
    get, post = mixfile.read(home / "mix.toml", None, ())
    ids = str((home / "ids.txt").resolve())
    assert get.route.path == f"/items/{{line:{ids}}}"
    assert post.route.body == f'{{"id": "{{line:{ids}}}"}}'


def test_advise_help_speaks_of_what_advise_has(lab):
    """`lab advise` has no --scenario and no levels: its help once gave "the scenario's"
    defaults and seconds "per level" (the options were `lab run`'s, shared)."""
    said = lab("advise", "--help")
    text = " ".join(said.out.split())
    assert said.code == 0, said.err
    assert "[default: the scenario's" not in text and "per level" not in text, text
    assert "Seconds measured per step" in text and "[default: the quick scenario's]" in text


def test_serve_help_says_one_front(lab):
    """`lab serve X --front bare,nginx` is refused (one server, one front), and its help once
    said it ran both."""
    said = lab("serve", "--help")
    text = " ".join(said.out.split())
    assert said.code == 0, said.err
    assert "one server, one front" in text and "[bare|nginx]" in text, text
