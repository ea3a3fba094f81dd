"""Stop a long command at any moment and check what it leaves: the signal harness.

`python -m tests.stopharness CASE SIGNAL DELAY_S [--group]` runs one case (a long command of the
lab, or a Compose service's entry point, natively on loopback), sends SIGNAL to it (or, with
--group, to its whole process group) DELAY_S seconds after it started, and prints one JSON line:
the exit code, the moment the signal met (start-up, check, a step, the report, serving), which
processes were still running after the grace period, and whether every finished step is intact.

Why a process of its own: it makes itself a child subreaper (prctl PR_SET_CHILD_SUBREAPER), so
everything the command started that outlives its parent is re-parented to the harness rather than
to init. "Nothing of the lab still runs" is then exactly "the harness has no live descendant",
however the process tree was cut. Survivors are listed, then killed, so one failed case never
disturbs the next.

tests/test_stop_anywhere.py runs a bounded set in CI; benchmarks/stop_sweep.py draws many more.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import ipaddress
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
LAB = [str(Path(sys.executable).parent / "lab")]  # the installed command, as users run it
PY = [sys.executable, "-m"]
PR_SET_CHILD_SUBREAPER = 36
GRACE_S = 10.0  # the lab's own stop grace (5 s) plus the watcher's (3 s), and some slack
EXIT_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Case:
    """One long command: its argv (with {out}, {port} and {port2} filled in per run), how long
    it runs when nothing stops it (None: until stopped), and whether it writes run directories."""

    argv: tuple[str, ...]
    runs_for_s: float | None = None
    writes_runs: bool = False


TINY_RUN = ("--models", "uwsgi-threads", "--levels", "1,2", "--duration", "1", "--warmup", "1")
TWO_WORKERS = ("--generators", "2", "--log", "{out}.log")  # the log off the checkout
CASES: dict[str, Case] = {
    "run": Case((*LAB, "run", *TINY_RUN, "--out", "{out}"), 15.0, True),
    "run-front": Case(
        (
            *LAB,
            "run",
            "--models",
            "gunicorn-gthread",
            "--levels",
            "1",
            "--duration",
            "1",
            "--warmup",
            "0",
            "--front",
            "nginx",
            "--out",
            "{out}",
        ),
        7.0,
        True,
    ),  # fmt: skip
    "advise": Case(
        (
            *LAB,
            "advise",
            "--rps",
            "20",
            "--p99-ms",
            "400",
            "--models",
            "uwsgi-threads",
            "--duration",
            "1",
            "--warmup",
            "0",
            "--budget-min",
            "1",
            "--out",
            "{out}",
        ),
        12.0,
        True,
    ),  # fmt: skip
    "reproduce": Case((*LAB, "reproduce", "mixpanel", "--quick", "--out", "{out}"), 40.0, True),
    "run-app-check": Case(
        (
            *LAB,
            "run",
            "--app",
            "servers.app_wsgi:app",
            "--app-dir",
            str(ROOT),
            "--path",
            "/sleep?ms=100",
            "--models",
            "uwsgi-threads,gunicorn-gthread",
            "--check-only",
            "--out",
            "{out}",
        ),
        5.0,
        True,
    ),  # fmt: skip
    "ui": Case((*LAB, "ui", "--port", "{port}", "--models", "uwsgi-threads", "--out", "{out}")),
    "serve": Case((*LAB, "serve", "uwsgi-threads", "--port", "{port}", "--meter-port", "{port2}")),
    "serve-front": Case(
        (
            *LAB,
            "serve",
            "gunicorn-gthread",
            "--front",
            "nginx",
            "--port",
            "{port}",
            "--meter-port",
            "{port2}",
        ),
    ),  # fmt: skip
    "upstream": Case((*LAB, "upstream", "--port", "{port}")),
    "generator": Case((*LAB, "generator", "--connect", "127.0.0.1:{port}", *TWO_WORKERS)),
    # Compose services' entry points, as compose.yaml runs them (on loopback here)
    "compose-serve": Case(
        (
            *PY,
            "lab.cli.serve",
            "uwsgi-gevent",
            "--host",
            "127.0.0.1",
            "--port",
            "{port}",
            "--meter-port",
            "{port2}",
            "--knob",
            "concurrency=20",
        ),
    ),  # fmt: skip
    "compose-upstream": Case((*PY, "servers.upstream", "--host", "127.0.0.1", "--port", "{port}")),
    "compose-postgres": Case((*PY, "lab.cli.dbserve", "postgres", "--port", "{port}")),
    "compose-redis": Case((*PY, "lab.cli.dbserve", "redis", "--port", "{port}")),
}
SIGNALS = {
    "INT": signal.SIGINT,
    "TERM": signal.SIGTERM,
    "HUP": signal.SIGHUP,
    "KILL": signal.SIGKILL,
    "TERM-KILL": signal.SIGTERM,  # as a supervisor: SIGTERM, then SIGKILL to the group after 3 s
}
SUPERVISOR_GRACE_S = 3.0


@dataclass
class Outcome:
    case: str
    signal: str
    delay_s: float
    group: bool
    moment: str = ""
    exit_code: int | None = None
    expected: list[int] = field(default_factory=list)
    survivors: list[str] = field(default_factory=list)
    broken: list[str] = field(default_factory=list)  # run files that do not parse
    run_dirs: list[str] = field(default_factory=list)
    resumed: list[int] = field(default_factory=list)  # each run directory's resume exit code
    exposed: list[str] = field(default_factory=list)  # listeners beyond loopback when signalled
    output_tail: str = ""

    @property
    def ok(self) -> bool:
        resumed = all(code == 0 for code in self.resumed)
        return (
            self.exit_code in self.expected and not self.survivors and not self.broken and resumed
        )


def expected_codes(sig: signal.Signals) -> list[int]:
    """The table's code for a stop (128 + the signal), or death by the signal itself: what
    SIGKILL always gives, and any signal before the command has set its handlers (a shell
    reports both as 128 + N)."""
    if sig == signal.SIGKILL:
        return [-sig]
    return [128 + sig, -sig]


def moment(out: Path, log: Path, case: Case, port: int) -> str:
    """Where the command was when the signal met it: for a server, whether its port answers; for
    a run, what it had written so far."""
    if not case.writes_runs:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return "serving"
        return "start-up"
    text = log.read_text(errors="replace") if log.exists() else ""
    runs = sorted(out.glob("*/manifest.json"))
    if not runs:
        return "start-up" if "written:" not in text else "report"
    run = runs[-1].parent
    steps = _lines(run / "steps.jsonl")
    if "done:" in text or "published vs measured" in text or "recommended" in text:
        return "report"
    if steps:
        return f"after step {len(steps)}"
    return "check" if not _lines(run / "preflight.jsonl") else "warm-up or first step"


def _lines(path: Path) -> list[str]:
    with contextlib.suppress(OSError):
        return [line for line in path.read_text().splitlines() if line.strip()]
    return []


def completed(out: Path) -> bool:
    """Every run directory says its work is complete (a stop that lands between the last write
    and the exit cannot change the outcome)."""
    manifests = [json.loads(m.read_text()) for m in out.glob("*/manifest.json")]
    return bool(manifests) and all(m.get("status") == "complete" for m in manifests)


def intact(out: Path) -> tuple[list[str], list[str]]:
    """Every run directory under out, and each of its files that does not parse: a finished
    step is one whole JSON line, a manifest one JSON document (the last line of steps.jsonl may
    be cut only if the lab was killed while writing it: it is then not a finished step, but a
    partial line must never be followed by another)."""
    runs, broken = [], []
    for manifest in sorted(out.glob("*/manifest.json")):
        run = manifest.parent
        runs.append(str(run))
        try:
            json.loads(manifest.read_text())
        except ValueError:
            broken.append(str(manifest))
        for name in ("steps.jsonl", "preflight.jsonl"):
            for line in _lines(run / name):
                try:
                    json.loads(line)
                except ValueError:
                    broken.append(f"{run / name}: {line[:80]}")
    return runs, broken


def descendants() -> list[psutil.Process]:
    """This harness's live descendants (reaping the dead: as subreaper, orphans are ours)."""
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass
    alive = []
    for proc in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if proc.status() != psutil.STATUS_ZOMBIE:
                alive.append(proc)
    return alive


def exposed() -> list[str]:
    """Every socket a descendant listens on that is not on loopback: none, by default."""
    found = []
    for proc in descendants():
        with contextlib.suppress(psutil.Error):
            for conn in proc.net_connections(kind="inet"):
                address = ipaddress.ip_address(conn.laddr.ip)
                if conn.status == psutil.CONN_LISTEN and not address.is_loopback:
                    found.append(f"{' '.join(proc.cmdline())[:80]} on {conn.laddr.ip}")
    return found


def survivors_after(grace_s: float) -> list[str]:
    """Whatever still runs after grace_s, described, then killed."""
    deadline = time.monotonic() + grace_s
    left = descendants()
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = descendants()
    described = []
    for proc in left:
        with contextlib.suppress(psutil.Error):
            described.append(f"{proc.pid} {' '.join(proc.cmdline())[:160]}")
            proc.kill()
    return described


def free_port() -> int:
    from lab.system.procs import free_port as pick

    return pick()


def resume(run_dir: Path, command: str) -> tuple[int, str]:
    """`lab COMMAND --resume DIR`: its exit code, and what is wrong if a step finished before the
    stop is not kept exactly (finished steps are never measured again nor changed)."""
    before = _lines(run_dir / "steps.jsonl")
    done = subprocess.run(
        [*LAB, command, "--resume", str(run_dir)], cwd=ROOT, capture_output=True, timeout=180
    )
    after = _lines(run_dir / "steps.jsonl")
    kept = after[: len(before)] == before
    return done.returncode, "" if kept else f"{run_dir}: finished steps changed by the resume"


def stop(proc: subprocess.Popen[bytes], how: str, group: bool) -> int | None:
    """Send the stop; the exit code (None: still running after EXIT_TIMEOUT_S)."""
    with contextlib.suppress(ProcessLookupError):
        (os.killpg if group else os.kill)(proc.pid, SIGNALS[how])
    if how == "TERM-KILL":
        with contextlib.suppress(subprocess.TimeoutExpired):
            return proc.wait(timeout=SUPERVISOR_GRACE_S)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    try:
        return proc.wait(timeout=EXIT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return None


def run_case(name: str, how: str, delay_s: float, group: bool, resumed: bool = False) -> Outcome:
    """One stop: start, wait delay_s, signal, wait for the exit and the grace period, check;
    with `resumed`, resume each run directory it left and check again."""
    case = CASES[name]
    tmp = Path(tempfile.mkdtemp(prefix="stopharness-"))
    out, log = tmp / "out", tmp / "output.log"
    fill = {"out": str(out), "port": str(free_port()), "port2": str(free_port())}
    argv = [part.format(**fill) for part in case.argv]
    expected = expected_codes(SIGNALS[how]) + ([-signal.SIGKILL] if how == "TERM-KILL" else [])
    outcome = Outcome(name, how, round(delay_s, 3), group, expected=expected)
    with open(log, "wb") as sink:
        proc = subprocess.Popen(
            argv, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT,
            process_group=0,  # its own group, as a shell's job: --group signals all of it
        )  # fmt: skip
        time.sleep(delay_s)
        port = int(fill["port"])
        outcome.moment = "finished" if proc.poll() is not None else moment(out, log, case, port)
        outcome.exposed = exposed()
        outcome.exit_code = stop(proc, how, group)
    if outcome.moment == "finished" or (outcome.exit_code == 0 and completed(out)):
        outcome.expected = [0, *outcome.expected]  # it had done its work before the signal came
    outcome.survivors = survivors_after(GRACE_S)
    outcome.run_dirs, outcome.broken = intact(out)
    if resumed and outcome.moment != "finished":
        for run_dir in map(Path, outcome.run_dirs):
            code, changed = resume(run_dir, case.argv[len(LAB)])
            outcome.resumed.append(code)
            outcome.broken += [changed] if changed else []
        outcome.survivors += survivors_after(GRACE_S)
    outcome.output_tail = log.read_text(errors="replace")[-600:]
    shutil.rmtree(tmp, ignore_errors=True)
    return outcome


def become_subreaper() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")


def one(name: str, sig: str, delay_s: float, group: bool = False, resumed: bool = False) -> Outcome:
    """Run one case in a harness process of its own (the subreaper): what tests call."""
    argv = [*PY, "tests.stopharness", name, sig, str(delay_s)]
    argv += [*(["--group"] if group else []), *(["--resume"] if resumed else [])]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=180)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"stopharness failed ({done.returncode}): {done.stderr[-2000:]}")
    data = json.loads(lines[-1])
    data.pop("ok", None)
    return Outcome(**data)


def main(argv: list[str] | None = None, report: Callable[[str], None] = print) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.stopharness", description=__doc__)
    parser.add_argument("case", choices=sorted(CASES))
    parser.add_argument("signal", choices=sorted(SIGNALS))
    parser.add_argument("delay_s", type=float)
    parser.add_argument("--group", action="store_true", help="signal the command's process group")
    parser.add_argument("--resume", action="store_true", help="then resume what it left")
    args = parser.parse_args(argv)
    become_subreaper()
    outcome = run_case(args.case, args.signal, args.delay_s, args.group, args.resume)
    report(json.dumps({**asdict(outcome), "ok": outcome.ok}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
