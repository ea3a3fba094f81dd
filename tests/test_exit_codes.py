"""docs/failures-and-stops.md's exit-code table, provoked row by row: the table is
`lab.record.exits.ROWS` (rendered into the page by `python -m lab.cli.reference`), each row names
its cases, and each case here runs the command and the input it stands for as a real process
(`lab advise`'s answers through the `Advice` that decides its exit, which a real search would take
minutes to reach) and checks the exit code, so a row and the code cannot disagree.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from lab.advise.advice import Advice, ModelAdvice
from lab.advise.target import Slo
from lab.cli.reference import FAILURES
from lab.front import nginx
from lab.record import errors, exits
from lab.record.models import ASYNC_PORT
from tests.fixture_run import FixtureStep, build_run
from tests.helpers import assert_page_current, lab_cli

ROOT = Path(__file__).resolve().parent.parent
DUD = """[models.dud]
description = "exits at once"
app = "wsgi"
unit = "thread"
argv = ["{bindir}/python", "-c", "raise SystemExit(3)", "{port}"]
"""
BROKEN_APP = """def app(environ, start_response):
    ok = environ["PATH_INFO"] == "/health"
    status = "200 OK" if ok else "500 Internal Server Error"
    start_response(status, [("Content-Type", "text/plain")])
    return [b"ok" if ok else b"broken"]
"""
FAKE_NGINX = "#!/bin/sh\necho 'nginx: [emerg] unknown directive \"lab\"' >&2\nexit 1\n"
TINY = ("--levels", "1", "--duration", "1", "--warmup", "0")


def lab(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        lab_cli(*args), capture_output=True, text=True, timeout=120, cwd=ROOT, env=env
    )
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    return done


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_listening(port: int, proc: subprocess.Popen[bytes], timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise AssertionError(f"nothing listened on {port} (exit {proc.poll()})")


def models(_: Path) -> int:
    return lab("models").returncode


def resumed_complete(tmp: Path) -> int:
    """`--resume` of a run that is already complete: nothing to do, done."""
    assert no_model_ran(tmp) == exits.NO_ANSWER
    (run,) = [p.parent for p in tmp.glob("*/manifest.json")]
    done = lab("run", "--resume", str(run))
    assert "nothing to resume" in done.stdout + done.stderr
    return done.returncode


def no_model_ran(tmp: Path) -> int:
    (tmp / "m.toml").write_text(DUD)
    args = ("--models-file", str(tmp / "m.toml"), "--models", "dud", *TINY)
    return lab("run", *args, "--out", str(tmp)).returncode


def no_responses(tmp: Path) -> int:
    """Every request times out (0.1 s against a 1 s upstream): the step is `no_responses`."""
    args = ("--models", "uwsgi-threads", *TINY, "--request-timeout", "0.1", "--delay-ms", "1000")
    done = lab("run", *args, "--out", str(tmp))
    assert "no step measured an answer" in done.stdout + done.stderr
    return done.returncode


def app_check_failed(tmp: Path) -> int:
    """The app imports (the input is fine) but answers /x with 500: the check fails, exit 1,
    its evidence kept."""
    (tmp / "broken_app.py").write_text(BROKEN_APP)
    args = ("--app", "broken_app:app", "--app-dir", str(tmp), "--path", "/health", "--path", "/x")
    done = lab("run", *args, "--models", "uwsgi-threads", "--check-only", "--out", str(tmp / "o"))
    assert len(list((tmp / "o").glob("*/appcheck.json"))) == 1
    (said,) = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert "cannot be compared fairly" in said
    return done.returncode


def serve_server_exited(tmp: Path) -> int:
    (tmp / "m.toml").write_text(DUD)
    args = ("dud", "--models-file", str(tmp / "m.toml"), "--port", str(free_port()))
    return lab("serve", *args).returncode


def ui_locust_died(tmp: Path) -> int:
    """`lab ui` serving, then its locust killed: the UI it serves exited by itself."""
    port = free_port()
    argv = lab_cli("ui", "--port", str(port), "--models", "uwsgi-threads", "--out", str(tmp))
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_listening(port, proc, 90)
        (locust,) = [
            child
            for child in psutil.Process(proc.pid).children(recursive=True)
            if "--web-port" in child.cmdline()
        ]
        locust.kill()
        return proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def usage(tmp: Path) -> int:
    return lab("run", "--levels", "0", "--out", str(tmp)).returncode


def app_does_not_import(tmp: Path) -> int:
    """Bad input: exit 2 with nothing started or written (not even --out)."""
    args = ("--app", "no_such_module:app", "--app-dir", str(tmp), "--path", "/")
    done = lab("run", *args, "--out", str(tmp / "out"))
    assert not (tmp / "out").exists()
    return done.returncode


def bad_db_url(tmp: Path) -> int:
    """A malformed --db-url is bad input: refused before the run directory is made."""
    args = ("--route", "db", "--db-url", "foo://x", *TINY, "--models", "uwsgi-threads")
    done = lab("run", *args, "--out", str(tmp / "out"))
    assert not (tmp / "out").exists()
    return done.returncode


def port_in_use(_: Path) -> int:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        return lab("upstream", "--port", str(busy.getsockname()[1])).returncode


def report_unwritable(tmp: Path) -> int:
    run = build_run(tmp / "run", [FixtureStep("m", 5)])
    (run / "report.html").mkdir()  # root writes through file modes: a directory stops it
    return lab("report", str(run)).returncode


def redis_missing(_: Path) -> int:
    """A database the machine lacks is its state, not a usage error (the server not on PATH)."""
    argv = [sys.executable, "-m", "lab.cli.dbserve", "redis", "--port", "1"]
    env = {**os.environ, "PATH": "/nonexistent"}
    return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, timeout=60).returncode


def nginx_missing(tmp: Path) -> int:
    """`--front nginx` on a machine without nginx (searched where it is not: nginx may be
    installed in /usr/sbin, which the lab always searches too)."""
    try:
        nginx.binary(search=str(tmp))
    except errors.LabError as e:
        return e.exit_code
    return 0


def nginx_config_refused(tmp: Path) -> int:
    """An nginx whose `nginx -t` refuses the lab's config (this one refuses every config)."""
    (tmp / "nginx").write_text(FAKE_NGINX)
    (tmp / "nginx").chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp}{os.pathsep}{os.environ['PATH']}"}
    args = ("uwsgi-threads", "--front", "nginx", "--port", str(free_port()))
    done = lab("serve", *args, env=env)
    assert "nginx refused its config" in done.stdout + done.stderr
    return done.returncode


def generator_no_master(tmp: Path) -> int:
    """No master at a closed port: said where and how long it waits, then one line, quickly."""
    args = ("--connect", f"127.0.0.1:{free_port()}", "--master-timeout", "1")
    started = time.monotonic()
    done = lab("generator", *args, "--log", str(tmp / "g.log"))
    assert time.monotonic() - started < 30
    assert "waiting for a generator master at 127.0.0.1:" in done.stderr
    assert "no generator master answered" in done.stdout + done.stderr
    return done.returncode


def compared(delay_b: float, rps_b: float) -> Callable[[Path], int]:
    """`lab compare` of a run against one at upstream delay `delay_b` and `rps_b` req/s."""

    def produce(tmp: Path) -> int:
        a = build_run(tmp / "a", [FixtureStep("m", 5, 1, (100.0,) * 3)])
        b = build_run(tmp / "b", [FixtureStep("m", 5, 1, (rps_b,) * 3)], delay_ms=delay_b)
        return lab("compare", str(a), str(b)).returncode

    return produce


def nothing_compared(tmp: Path) -> int:
    """`lab compare` of a run whose steps file is empty (a manifest, no step) against one that
    measured: no point in both, one line saying nothing was compared, never exit 0."""
    a = build_run(tmp / "a", [FixtureStep("m", 5, 1, (100.0,) * 3)])
    (a / "steps.jsonl").write_text("")
    b = build_run(tmp / "b", [FixtureStep("m", 5, 1, (100.0,) * 3)])
    done = lab("compare", str(a), str(b))
    assert "nothing was compared" in done.stdout + done.stderr
    return done.returncode


def model(name: str, meets: bool, runs_app: str = "as is", limited_by: str = "none") -> ModelAdvice:
    return ModelAdvice(
        name, meets, {}, "", "", 1, 10, 60, None, limited_by, "", "", "", 1, runs_app
    )


def advised(*found: ModelAdvice) -> Callable[[Path], int]:
    """The exit of the advice on `found`, whose sentence must say the same: "not confirmed"
    exactly when it exits 4."""

    def produce(_: Path) -> int:
        advice = Advice(Slo(300, 250), found, "run", True)
        said, code = advice.sentence(), advice.exit_code()
        assert said.startswith("not confirmed") == (code == exits.NOT_CONFIRMED), said
        return code

    return produce


def stopped(sig: signal.Signals) -> Callable[[Path], int]:
    """`lab upstream` serving, stopped by `sig`: 128 + its number, everything stopped."""

    def produce(_: Path) -> int:
        port = free_port()
        proc = subprocess.Popen(
            lab_cli("upstream", "--port", str(port)),
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_listening(port, proc)
        proc.send_signal(sig)
        return proc.wait(timeout=60)

    return produce


CASES: dict[str, tuple[int, Callable[[Path], int]]] = {
    "models": (exits.DONE, models),
    "run-resume-complete": (exits.DONE, resumed_complete),
    "advise-as-is-meets": (
        exits.DONE,
        advised(model("uvicorn", True, ASYNC_PORT), model("uwsgi", True)),
    ),
    "compare-unchanged": (exits.DONE, compared(100.0, 100.0)),
    "run-no-model-ran": (exits.NO_ANSWER, no_model_ran),
    "run-no-responses": (exits.NO_ANSWER, no_responses),
    "app-check-failed": (exits.NO_ANSWER, app_check_failed),
    "advise-none-meets": (exits.NO_ANSWER, advised(model("a", False))),
    "compare-nothing-compared": (exits.NO_ANSWER, nothing_compared),
    "serve-server-exited": (exits.NO_ANSWER, serve_server_exited),
    "ui-locust-died": (exits.NO_ANSWER, ui_locust_died),
    "usage": (exits.USAGE, usage),
    "app-does-not-import": (exits.USAGE, app_does_not_import),
    "run-bad-db-url": (exits.USAGE, bad_db_url),
    "upstream-port-in-use": (exits.REFUSED, port_in_use),
    "report-unwritable": (exits.REFUSED, report_unwritable),
    "redis-missing": (exits.REFUSED, redis_missing),
    "nginx-missing": (exits.REFUSED, nginx_missing),
    "nginx-config-refused": (exits.REFUSED, nginx_config_refused),
    "generator-no-master": (exits.REFUSED, generator_no_master),
    "advise-not-confirmed": (
        exits.NOT_CONFIRMED,
        advised(model("a", False, limited_by="apparatus")),
    ),
    "advise-held-back-beside-a-port": (  # 4 wins over 5: the app as it is is not known
        exits.NOT_CONFIRMED,
        advised(model("uvicorn", True, ASYNC_PORT), model("uwsgi", False, limited_by="apparatus")),
    ),
    "advise-only-a-port": (
        exits.ONLY_PORT,
        advised(model("uvicorn", True, ASYNC_PORT), model("uwsgi", False)),
    ),
    "compare-changed": (exits.CHANGED, compared(100.0, 200.0)),
    "compare-other-scenario": (exits.OTHER_SCENARIO, compared(125.0, 100.0)),
    "sigint": (128 + signal.SIGINT, stopped(signal.SIGINT)),
    "sigterm": (128 + signal.SIGTERM, stopped(signal.SIGTERM)),
    "sighup": (128 + signal.SIGHUP, stopped(signal.SIGHUP)),
}
ROW_OF = {case: row for row in exits.ROWS for case in row.cases}


def test_the_page_shows_the_table() -> None:
    assert_page_current(FAILURES, exits.BEGIN, exits.END, exits.markdown)


def test_every_case_a_row_names_is_run_here_and_no_other() -> None:
    assert set(CASES) == set(ROW_OF)
    assert all(row.cases for row in exits.ROWS)


def test_every_code_the_commands_exit_with_is_a_row() -> None:
    named = {v for k, v in vars(errors).items() if k.startswith("EXIT_")}
    named |= {cls.exit_code for cls in (errors.LabError, errors.Refused, errors.NoAnswer)}
    assert named <= {code for row in exits.ROWS for code in row.codes}


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_the_command_exits_with_its_rows_code(case: str, tmp_path: Path) -> None:
    code, produce = CASES[case]
    assert code in ROW_OF[case].codes, f"{case}: its row does not list {code}"
    assert produce(tmp_path) == code
