"""docs/running.md's exit-code table, walked: every code it lists is produced by a real command
(or, for `lab advise`'s answers, by the advice that decides its exit), and the code does not use
one the table leaves out.

The signal codes 130 and 143 are run by tests/test_reliability.py; here SIGHUP stands for them.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from lab.advise.advice import Advice, ModelAdvice
from lab.advise.target import Slo
from lab.config.models import ASYNC_PORT
from lab.front import nginx
from lab.record import errors
from tests.conftest import lab_cli
from tests.fixture_run import FixtureStep, build_run

ROOT = Path(__file__).resolve().parent.parent
DUD = """[models.dud]
description = "exits at once"
app = "wsgi"
unit = "thread"
argv = ["{bindir}/python", "-c", "raise SystemExit(3)", "{port}"]
"""


def table_codes() -> set[int]:
    """The codes in the first column of the table under "Exit codes and bad input"."""
    text = (ROOT / "docs/running.md").read_text()
    section = text.split("## Exit codes and bad input", 1)[1].split("\n## ", 1)[0]
    cells = re.findall(r"^\| ([\d /]+) \|", section, flags=re.M)
    return {int(code) for cell in cells for code in cell.split("/")}


def lab(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(lab_cli(*args), capture_output=True, text=True, timeout=60, cwd=ROOT)


def done(_: Path) -> int:
    return lab("models").returncode


def no_model_ran(tmp: Path) -> int:
    (tmp / "m.toml").write_text(DUD)
    args = ("--models-file", str(tmp / "m.toml"), "--models", "dud", "--levels", "1")
    return lab("run", *args, "--duration", "1", "--warmup", "0", "--out", str(tmp)).returncode


def usage(tmp: Path) -> int:
    return lab("run", "--levels", "0", "--out", str(tmp)).returncode


def port_in_use(_: Path) -> int:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        return lab("upstream", "--port", str(busy.getsockname()[1])).returncode


def redis_missing(_: Path) -> int:
    """A database the machine lacks is its state, not a usage error (the server not on PATH)."""
    argv = [sys.executable, "-m", "lab.cli.dbserve", "redis", "--port", "1"]
    env = {**os.environ, "PATH": "/nonexistent"}
    return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, timeout=60).returncode


def nginx_missing(tmp: Path) -> int:
    """`--front nginx` on a machine without nginx (searched where it is not)."""
    try:
        nginx.binary(search=str(tmp))
    except errors.LabError as e:
        return e.exit_code
    return 0


def report_unwritable(tmp: Path) -> int:
    run = build_run(tmp / "run", [FixtureStep("m", 5)])
    (run / "report.html").mkdir()  # root writes through file modes: a directory stops it
    return lab("report", str(run)).returncode


def compared(delay_b: float, rps_b: float) -> Callable[[Path], int]:
    """`lab compare` of a run against one at upstream delay `delay_b` and `rps_b` req/s."""

    def produce(tmp: Path) -> int:
        a = build_run(tmp / "a", [FixtureStep("m", 5, 1, (100.0,) * 3)])
        b = build_run(tmp / "b", [FixtureStep("m", 5, 1, (rps_b,) * 3)], delay_ms=delay_b)
        return lab("compare", str(a), str(b)).returncode

    return produce


def model(name: str, meets: bool, runs_app: str = "as is", limited_by: str = "none") -> ModelAdvice:
    return ModelAdvice(
        name, meets, {}, "", "", 1, 10, 60, None, limited_by, "", "", "", 1, runs_app
    )


def advised(*models: ModelAdvice) -> Callable[[Path], int]:
    return lambda _: Advice(Slo(300, 250), models, "run", True).exit_code()


def hang_up(tmp: Path) -> int:
    """`lab run` stopped by SIGHUP once its sweep started (its manifest is written): 128 + 1."""
    argv = lab_cli("run", "--models", "uwsgi-threads", "--levels", "1", "--duration", "30")
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    proc = subprocess.Popen([*argv, "--out", str(tmp)], cwd=ROOT, **quiet)
    deadline = time.monotonic() + 30
    while not list(tmp.glob("*/manifest.json")) and time.monotonic() < deadline:
        time.sleep(0.1)
    proc.send_signal(signal.SIGHUP)
    return proc.wait(timeout=60)


CASES: dict[str, tuple[int, Callable[[Path], int]]] = {
    "done": (0, done),
    "run-no-model-ran": (errors.EXIT_NO_ANSWER, no_model_ran),
    "advise-none-meets": (errors.EXIT_NO_ANSWER, advised(model("a", False))),
    "usage": (errors.EXIT_USAGE, usage),
    "upstream-port-in-use": (errors.EXIT_REFUSED, port_in_use),
    "report-unwritable": (errors.EXIT_REFUSED, report_unwritable),
    "redis-missing": (errors.EXIT_REFUSED, redis_missing),
    "nginx-missing": (errors.EXIT_REFUSED, nginx_missing),
    "advise-not-confirmed": (
        errors.EXIT_NOT_CONFIRMED,
        advised(model("a", False, limited_by="apparatus")),
    ),
    "advise-only-a-port": (
        errors.EXIT_ONLY_PORT,
        advised(model("uvicorn", True, ASYNC_PORT), model("uwsgi", False)),
    ),
    "advise-as-is-meets": (0, advised(model("uvicorn", True, ASYNC_PORT), model("uwsgi", True))),
    "compare-unchanged": (0, compared(100.0, 100.0)),
    "compare-changed": (errors.EXIT_CHANGED, compared(100.0, 200.0)),
    "compare-other-scenario": (errors.EXIT_OTHER_SCENARIO, compared(125.0, 100.0)),
    "sighup": (128 + signal.SIGHUP, hang_up),
}
SIGNALS = {128 + signal.SIGINT, 128 + signal.SIGTERM}  # tests/test_reliability.py


def test_every_code_in_the_table_has_a_case_and_no_case_is_off_the_table() -> None:
    walked = {code for code, _ in CASES.values()} | SIGNALS
    assert walked == table_codes()


@pytest.mark.parametrize(("code", "produce"), CASES.values(), ids=CASES.keys())
def test_the_command_exits_with_the_tables_code(
    code: int, produce: Callable[[Path], int], tmp_path: Path
) -> None:
    assert produce(tmp_path) == code
