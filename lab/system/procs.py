"""Child processes the lab starts: own process group, pid file, bounded readiness, sure stop.

Every server, upstream and load generator runs in its own session (process group), so stopping it
stops every worker it forked, and its life is tied to the lab's (lab.system.tether: a parent-death
signal and a watcher that stops every group the lab held when the lab dies, however). A pid file
per process lets a later run find and remove leftovers of a run whose watcher died too.
"""

from __future__ import annotations

import contextlib
import errno
import http.client
import json
import math
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.parse
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import psutil

from lab.record.errors import NoAnswer, Refused
from lab.system import tether
from lab.system.http_client import get, serving
from lab.system.resources import child_env

STOP_GRACE_S = 5.0
OWNER_PID_FILE = "lab.pid"  # the lab process that owns a run directory's children


class StartFailed(NoAnswer):
    """A process exited or never answered while the lab waited for it to become ready: the
    command ran, and the process it serves did not (exit 1, as when it exits later)."""

    def __init__(self, message: str, evidence: dict[str, object]) -> None:
        super().__init__(message)
        self.evidence = evidence


@dataclass
class Proc:
    name: str
    argv: list[str]
    popen: subprocess.Popen[bytes]
    log_path: Path | None  # None: its output is this process's own (a foreground server)
    pid_file: Path | None = None
    cpus: tuple[int, ...] = field(default_factory=tuple)
    stopped: bool = False  # once stopped, never signal the group id again: it may be reused

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def log_tail(self, lines: int = 20) -> list[str]:
        if self.log_path is None:
            return []
        with contextlib.suppress(OSError), open(self.log_path, errors="replace") as f:
            return [line.rstrip("\n") for line in deque(f, maxlen=lines)]
        return []

    def evidence(self) -> dict[str, object]:
        return {"exit_code": self.popen.poll(), "log_tail": self.log_tail()}

    def stop(self, grace_s: float = STOP_GRACE_S) -> None:
        """TERM the whole process group, then KILL whatever is left after the grace period."""
        if self.stopped:
            return
        stop_group(self.pid, grace_s, wait=self.popen.wait)
        self.stopped = True
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=grace_s)
        if self.pid_file is not None:
            self.pid_file.unlink(missing_ok=True)
        _running.pop(self.pid, None)


# Every child started and not yet stopped, so an interrupted run can stop them all at once.
_running: dict[int, Proc] = {}


def stop_all(grace_s: float = STOP_GRACE_S) -> list[str]:
    """Stop every child this process started and has not stopped yet; return their names.

    All groups are told at once and share one grace period, so a supervisor that kills the lab a
    few seconds after its SIGTERM finds nothing left (and the watcher stops whatever was)."""
    procs = list(_running.values())[::-1]
    for proc in procs:
        for sig in (signal.SIGTERM, signal.SIGCONT):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, sig)
    deadline = time.monotonic() + grace_s
    for proc in procs:
        proc.stop(max(deadline - time.monotonic(), 0.0))
    return [proc.name for proc in procs]


def stop_group(pgid: int, grace_s: float, wait: Any = None) -> None:
    """TERM (and CONT, so a stopped group can act on it) a process group, then KILL it.

    `wait(timeout=...)` waits for the group leader when it is our child; otherwise the group is
    polled until it is empty or the grace period ends.
    """
    for sig in (signal.SIGTERM, signal.SIGCONT):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, sig)
    deadline = time.monotonic() + grace_s
    if wait is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            wait(timeout=grace_s)
    while time.monotonic() < deadline and group_alive(pgid):
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)  # workers that outlived their master, too
    tether.WATCHER.release(pgid)


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


MAX_PID_FILE_BYTES = 1_000_000
DEFAULT_PID_MAX = 4_194_304  # Linux's upper limit for /proc/sys/kernel/pid_max


def pid_max() -> int:
    try:
        return int(Path("/proc/sys/kernel/pid_max").read_text())
    except (OSError, ValueError):
        return DEFAULT_PID_MAX


@dataclass(frozen=True)
class PidRecord:
    """A pid file's content: enough to tell our process from another that reused its pid."""

    name: str
    pid: int
    create_time: float  # psutil's process start time, compared before anything is killed
    argv: tuple[str, ...]

    @classmethod
    def of(cls, name: str, pid: int, argv: list[str]) -> PidRecord:
        try:
            created = psutil.Process(pid).create_time()
        except psutil.Error:
            created = 0.0
        return cls(name, pid, created, tuple(argv))

    def write(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({**vars(self), "argv": list(self.argv)}) + "\n")

    @classmethod
    def read(cls, path: Path) -> PidRecord | None:
        """The record, or None for anything that is not one the lab wrote: unreadable, not JSON,
        wrong shape, or a pid that can never be a child of ours (<= 1 signals groups or init,
        above pid_max is no process). None means "never signal anything because of this file"."""
        try:
            if not path.is_file() or path.stat().st_size > MAX_PID_FILE_BYTES:  # FIFO, /dev/zero
                return None
            data = json.loads(path.read_text())
            pid, created, argv = data["pid"], float(data["create_time"]), data["argv"]
        except (OSError, ValueError, KeyError, TypeError, RecursionError):
            return None
        if type(pid) is not int or not 1 < pid <= pid_max() or not math.isfinite(created):
            return None
        if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
            return None
        return cls(str(data["name"]), pid, created, tuple(argv))

    def is_running(self) -> bool:
        """True only if this very process (same pid and start time) is still alive."""
        try:
            proc = psutil.Process(self.pid)
            return abs(proc.create_time() - self.create_time) < 0.05 and proc.status() != "zombie"
        except psutil.Error:
            return False


def pinned(argv: list[str], cpus: Sequence[int] | None) -> list[str]:
    """argv run under taskset on `cpus` (it and every process it starts); unchanged without."""
    if cpus and shutil.which("taskset"):
        return ["taskset", "--cpu-list", ",".join(map(str, cpus)), *argv]
    return list(argv)


def start(
    name: str,
    argv: list[str],
    *,
    log_path: Path | None,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    cpus: tuple[int, ...] = (),
    pid_dir: Path | None = None,
    pipe_stdout: bool = False,
) -> Proc:
    """Start argv in its own session, pinned to `cpus` when given.

    Output goes to log_path (None: to this process's own stdout and stderr); with pipe_stdout,
    stdout is a pipe for the caller to read instead.
    Without `env` the child gets `child_env()`: the lab's code root on its Python path.
    """
    argv = pinned(argv, cpus)
    if log_path is not None:
        log_path.parent.mkdir(parents=True, exist_ok=True)
    with tether.deferred_stops(), _log(log_path) as log:
        try:
            popen = spawn(
                argv,
                stdout=subprocess.PIPE if pipe_stdout else log,
                stderr=log if pipe_stdout or log is None else subprocess.STDOUT,
                env=child_env() if env is None else env,
                cwd=cwd,
            )
        except OSError as e:  # missing, not executable (EACCES, ENOEXEC), argv too long (E2BIG)
            reason = f"cannot execute {argv[0]}: {e.strerror or e}"
            raise StartFailed(f"{name}: {reason}", {"exit_code": None, "error": reason}) from None
        pid_file = None
        if pid_dir is not None:
            pid_file = pid_dir / f"{name}.pid"
            PidRecord.of(name, popen.pid, argv).write(pid_file)
        proc = Proc(name, argv, popen, log_path, pid_file, cpus)
        _running[proc.pid] = proc
    return proc


def _log(path: Path | None) -> contextlib.AbstractContextManager[Any]:
    return contextlib.nullcontext() if path is None else open(path, "ab")


def spawn(argv: list[str], **popen_kwargs: Any) -> subprocess.Popen[Any]:
    """subprocess.Popen in a session of its own, its life tied to this process's (tether): the
    one way the lab starts a child. Stop it with `stop_group(popen.pid, ...)`."""
    with tether.deferred_stops():
        popen: subprocess.Popen[Any] = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=tether.preexec(),  # the child holds itself in the watcher
            **popen_kwargs,
        )
    return popen


def run_client(argv: list[str], timeout_s: float) -> subprocess.CompletedProcess[str]:
    """`subprocess.run(argv, capture_output=True, text=True)` for a bounded client (ab, oha,
    rewrk), started as `spawn` starts every child, so it dies with the lab however the lab is
    stopped; stopped with its group on a timeout or an interrupt."""
    proc = spawn(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except BaseException:
        stop_group(proc.pid, 1.0, proc.wait)
        proc.communicate()
        raise
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


EXECUTABLE_MAGIC = (b"\x7fELF", b"#!")  # what execve(2) runs on Linux without binfmt_misc


def not_executable(path: Path) -> str:
    """Why execve would refuse `path` (ENOEXEC, EACCES), or "" if it looks runnable."""
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError as e:
        return f"cannot be read: {e.strerror or e}"
    if not os.access(path, os.X_OK):
        return "is not executable (chmod +x?)"
    if not head.startswith(EXECUTABLE_MAGIC):
        return "is neither a program nor a script starting with #! (execve: ENOEXEC)"
    return ""


class Watched(Protocol):
    """Anything the lab waits for: a local process or a container."""

    name: str

    def alive(self) -> bool: ...
    def evidence(self) -> dict[str, object]: ...


def wait_http(proc: Watched, url: str, timeout_s: float) -> None:
    """Poll url until it answers with a status that says it is serving (`http_client.serving`:
    under 500, so a route behind a login that answers 302 or 401 counts), the process dies, or
    timeout_s passes (StartFailed)."""
    deadline = time.monotonic() + timeout_s
    last = "no answer yet"
    parts = urllib.parse.urlsplit(url)
    base, path = (
        f"{parts.scheme}://{parts.netloc}",
        parts.path + (f"?{parts.query}" if parts.query else ""),
    )
    while time.monotonic() < deadline:
        if not proc.alive():
            evidence = proc.evidence()
            raise StartFailed(f"{proc.name} exited with code {evidence.get('exit_code')}", evidence)
        try:
            status, _, _ = get(base, path, timeout_s=1)
            if serving(status):
                return
            last = f"HTTP {status}"
        except (OSError, http.client.HTTPException) as e:
            last = str(e)
        time.sleep(0.1)
    raise StartFailed(
        f"{proc.name} did not answer {url} within {timeout_s:.0f} s ({last})", proc.evidence()
    )


def family(host: str) -> socket.AddressFamily:
    """AF_INET6 for an IPv6 literal (`::1`, `[::1]`), else AF_INET: ports are per family."""
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def url(host: str, port: int) -> str:
    """`http://host:port`, with the brackets an IPv6 literal needs in a URL."""
    return f"http://{bind_address(host, port)}"


def bind_address(host: str, port: int) -> str:
    """`host:port` as servers take it (`[::1]:8000` for IPv6: uWSGI and gunicorn both need it)."""
    bare = host.strip("[]")
    return f"[{bare}]:{port}" if ":" in bare else f"{bare}:{port}"


def free_port(host: str = "127.0.0.1") -> int:
    bare = host.strip("[]")
    with socket.socket(family(bare)) as s:
        s.bind((bare, 0))
        port: int = s.getsockname()[1]
        return port


def ensure_port_free(host: str, port: int, what: str) -> None:
    """Fail with the port's number before starting anything that would not be able to bind it."""
    bare = host.strip("[]")
    with socket.socket(family(bare)) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((bare, port))
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                raise Refused(
                    f"port {port} on {host} ({what}) is already in use; stop whatever holds it "
                    f"(`ss -ltnp 'sport = :{port}'`) or choose another port"
                ) from None
            raise Refused(f"cannot bind {host}:{port} ({what}): {e.strerror}") from None
