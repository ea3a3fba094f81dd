"""Every child's life tied to the lab's, whatever stops the lab (even SIGKILL).

Why: each child runs in a session of its own (so stopping it stops every worker it forked), so a
signal to the lab's process group or a closing terminal never reaches it, and a lab killed outright
(SIGKILL, the out-of-memory killer) runs no handler. Two ties, so that either holds alone:

- a parent-death signal (`prctl(PR_SET_PDEATHSIG, SIGTERM)`) on each direct child. It fires when
  the *thread* that started the child exits, so it is set only for children the main thread starts;
  the kernel clears it when a child changes its user (PostgreSQL run as `postgres` by root); and it
  reaches the direct child only, never its workers;
- a watcher (`python -m lab.system.tether`), the first child the lab starts, in a session of its
  own, reading a pipe from the lab. Each child writes its own process group to that pipe between
  its fork and its exec (so there is no moment at which it runs unknown to the watcher), and the
  lab takes it back when it stops the child. When the pipe closes -- the lab exited, however --
  the watcher stops every group still held: TERM (and CONT), then KILL after `WATCH_GRACE_S`, so
  uWSGI, nginx and locust workers and PostgreSQL backends go with their leader, and runs each
  command held (the Docker backend's removal of its containers). A group whose leader's pid now
  names another process is never touched. A clean exit closes the pipe and waits for the watcher.

Pid files and `lab doctor --clean` (lab.run.leftovers) stay as the second line of defence.
A stop signal that arrives while a child is being started waits until the lab has registered it
too (`deferred_stops`), so the lab's own stop cannot miss it either.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

WATCH_GRACE_S = 3.0
PR_SET_PDEATHSIG = 1
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
COMMAND_TIMEOUT_S = 30.0

try:  # resolved once, here: a child between fork and exec must not load libraries
    _prctl: Callable[..., int] | None = ctypes.CDLL(None, use_errno=True).prctl
except (OSError, AttributeError):  # not Linux
    _prctl = None


def preexec() -> Callable[[], None]:
    """What a fresh child runs before it execs (preexec_fn, after the fork): the watcher is told
    of its process group by the child itself, so no moment exists at which the child runs and the
    watcher does not know it, whenever the lab dies; the parent-death signal, only for a child the
    main thread starts (the module says why); stop signals unblocked."""
    pipe = WATCHER.pipe_for_child()
    main = threading.current_thread() is threading.main_thread()

    def tie() -> None:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
        if pipe is not None:  # atomic (< PIPE_BUF), so never interleaved with the lab's lines
            with contextlib.suppress(OSError):
                os.write(pipe, hold_message(os.getpid()))
        if main and _prctl is not None:
            _prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM))

    return tie


def hold_message(pgid: int) -> bytes:
    return (json.dumps({"hold": pgid, "leader_start": start_time(pgid)}) + "\n").encode()


@contextlib.contextmanager
def deferred_stops() -> Iterator[None]:
    """Ctrl-C and the stop signals wait until the block ends, then act as they would have: a child
    started inside the block is registered (stoppable) before any handler runs. The main thread
    only (Python runs signal handlers there); a signal that is ignored stays ignored."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []
    previous = {
        sig: signal.signal(sig, lambda signum, _: pending.append(signum))
        for sig in STOP_SIGNALS
        if signal.getsignal(sig) is not signal.SIG_IGN
    }
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for signum in dict.fromkeys(pending):
            signal.raise_signal(signum)


class Watcher:
    """The lab's end of the pipe to its watcher, started with the first child, per process."""

    def __init__(self) -> None:
        self.owner = 0  # the pid that started the watcher: a forked copy starts its own
        self.pipe: int | None = None
        self.process: subprocess.Popen[bytes] | None = None
        self.lock = threading.Lock()
        atexit.register(self.close)

    def _send(self, message: dict[str, object], start: bool = True) -> None:
        """Write one message; the first that holds something starts the watcher (a release or a
        cancel before that has nothing to take back)."""
        with self.lock:
            if self.owner != os.getpid():
                if not start:
                    return
                self._start()
            if self.pipe is None:
                return
            try:
                os.write(self.pipe, (json.dumps(message) + "\n").encode())
            except OSError:  # the watcher is gone: the parent-death signal still holds
                self.pipe = None

    def pipe_for_child(self) -> int | None:
        """The pipe's write end, for a child to hold itself before it execs (it closes on exec);
        the watcher started first if need be."""
        with self.lock:
            if self.owner != os.getpid():
                self._start()
            return self.pipe

    def _start(self) -> None:
        from lab.system.resources import child_env

        self.owner, self.pipe = os.getpid(), None
        read, write = os.pipe()  # both close-on-exec: no other child inherits the write end
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "lab.system.tether"],
                stdin=read,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env=child_env(),
                start_new_session=True,
            )
        except OSError:
            os.close(write)
            return
        finally:
            os.close(read)
        self.pipe = write

    def close(self) -> None:
        """On a clean exit: close the pipe and wait (bounded) for the watcher to stop whatever is
        still held and exit, so nothing outlives this process, not even the watcher."""
        with self.lock:
            if self.pipe is None or self.owner != os.getpid() or self.process is None:
                return
            os.close(self.pipe)
            self.pipe = None
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=WATCH_GRACE_S + 2)

    def release(self, pgid: int) -> None:
        self._send({"release": pgid}, start=False)

    def on_death(self, key: str, argv: list[str]) -> None:
        """Run argv (bounded) if the lab dies before `cancel(key)`."""
        self._send({"command": key, "argv": argv})

    def cancel(self, key: str) -> None:
        self._send({"cancel": key}, start=False)


WATCHER = Watcher()


def start_time(pid: int) -> str:
    """The process's start time in clock ticks since boot (/proc/PID/stat field 22); "" if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rpartition(")")[2].split()[19]


def ours(pgid: int, leader_start: str) -> bool:
    """The group is still the one the lab started: its leader is the same process, or the leader is
    gone and the group lives on (a pid that is a live group's id cannot be reused)."""
    now = start_time(pgid)
    if now:
        return now == leader_start
    try:
        os.killpg(pgid, 0)
    except OSError:
        return False
    return True


def stop_groups(groups: dict[int, str], grace_s: float = WATCH_GRACE_S) -> None:
    """TERM and CONT every group that is ours, then KILL whatever is left after grace_s."""
    alive = [pgid for pgid, leader_start in groups.items() if ours(pgid, leader_start)]
    for pgid in alive:
        for sig in (signal.SIGTERM, signal.SIGCONT):
            with contextlib.suppress(OSError):
                os.killpg(pgid, sig)
    deadline = time.monotonic() + grace_s
    while alive and time.monotonic() < deadline:
        time.sleep(0.05)
        alive = [pgid for pgid in alive if _group_alive(pgid)]
    for pgid in alive:
        with contextlib.suppress(OSError):
            os.killpg(pgid, signal.SIGKILL)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except OSError:
        return False
    return True


def watch(lines: Iterator[str]) -> tuple[dict[int, str], dict[str, list[str]]]:
    """Read the lab's messages until the pipe closes; what is still held then."""
    groups: dict[int, str] = {}
    commands: dict[str, list[str]] = {}
    for line in lines:
        with contextlib.suppress(ValueError, KeyError, TypeError):
            message = json.loads(line)
            if "hold" in message:
                groups[int(message["hold"])] = str(message["leader_start"])
            elif "release" in message:
                groups.pop(int(message["release"]), None)
            elif "command" in message:
                commands[str(message["command"])] = [str(a) for a in message["argv"]]
            elif "cancel" in message:
                commands.pop(str(message["cancel"]), None)
    return groups, commands


def main() -> int:
    """The watcher: deaf to the terminal's signals, it acts only when the lab's pipe closes."""
    for sig in (signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    groups, commands = watch(iter(sys.stdin))
    stop_groups(groups)
    for argv in commands.values():
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run(argv, stdin=subprocess.DEVNULL, timeout=COMMAND_TIMEOUT_S, check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
