"""Child processes the lab starts: own process group, pid file, bounded readiness, sure stop.

Every server, upstream and load generator runs in its own session (process group), so stopping it
stops every worker it forked. A pid file per process lets a later run find and remove leftovers of a
run that was killed outright.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from lab.errors import LabError

STOP_GRACE_S = 5.0


class StartFailed(LabError):
    """A process exited or never answered while the lab waited for it to become ready."""

    def __init__(self, message: str, evidence: dict[str, object]) -> None:
        super().__init__(message)
        self.evidence = evidence


@dataclass
class Proc:
    name: str
    argv: list[str]
    popen: subprocess.Popen[bytes]
    log_path: Path
    pid_file: Path | None = None
    cpus: tuple[int, ...] = field(default_factory=tuple)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def log_tail(self, lines: int = 20) -> list[str]:
        with contextlib.suppress(OSError), open(self.log_path, errors="replace") as f:
            return [line.rstrip("\n") for line in deque(f, maxlen=lines)]
        return []

    def evidence(self) -> dict[str, object]:
        return {"exit_code": self.popen.poll(), "log_tail": self.log_tail()}

    def stop(self, grace_s: float = STOP_GRACE_S) -> None:
        """TERM the whole process group, then KILL whatever is left after the grace period."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGTERM)
        try:
            self.popen.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)  # workers that outlived their master, too
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=grace_s)
        if self.pid_file is not None:
            self.pid_file.unlink(missing_ok=True)


def start(
    name: str,
    argv: list[str],
    *,
    log_path: Path,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    cpus: tuple[int, ...] = (),
    pid_dir: Path | None = None,
    pipe_stdout: bool = False,
) -> Proc:
    """Start argv in its own session, pinned to `cpus` when given.

    Output goes to log_path; with pipe_stdout, stdout is a pipe for the caller to read instead.
    """
    if cpus and shutil.which("taskset"):
        argv = ["taskset", "--cpu-list", ",".join(map(str, cpus)), *argv]
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        try:
            popen = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE if pipe_stdout else log,
                stderr=log if pipe_stdout else subprocess.STDOUT,
                env=env,
                cwd=cwd,
                start_new_session=True,
            )
        except FileNotFoundError:
            raise LabError(f"{name}: program not found: {argv[0]}") from None
    pid_file = None
    if pid_dir is not None:
        pid_dir.mkdir(parents=True, exist_ok=True)
        pid_file = pid_dir / f"{name}.pid"
        pid_file.write_text(f"{popen.pid}\n")
    return Proc(name, argv, popen, log_path, pid_file, cpus)


def wait_http(proc: Proc, url: str, timeout_s: float) -> None:
    """Poll url until it answers 200, the process dies, or timeout_s passes (StartFailed)."""
    deadline = time.monotonic() + timeout_s
    last = "no answer yet"
    while time.monotonic() < deadline:
        if not proc.alive():
            raise StartFailed(f"{proc.name} exited with code {proc.popen.poll()}", proc.evidence())
        try:
            with urllib.request.urlopen(url, timeout=1) as reply:
                if reply.status == 200:
                    return
                last = f"HTTP {reply.status}"
        except OSError as e:
            last = str(e)
        time.sleep(0.1)
    raise StartFailed(
        f"{proc.name} did not answer {url} within {timeout_s:.0f} s ({last})", proc.evidence()
    )


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def ensure_port_free(host: str, port: int, what: str) -> None:
    """Fail with the port's number before starting anything that would not be able to bind it."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                raise LabError(
                    f"port {port} on {host} ({what}) is already in use; stop whatever holds it "
                    f"(`ss -ltnp 'sport = :{port}'`) or choose another port"
                ) from None
            raise LabError(f"cannot bind {host}:{port} ({what}): {e.strerror}") from None
