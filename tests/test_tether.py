"""lab.system.tether: every child's life tied to the lab's, with real processes.

A lab process started here starts a child whose own worker (a grandchild, in the child's group)
would outlive it; SIGKILL of the lab must take both within the watcher's grace period. The
watcher never touches a group whose leader's pid now names another process, and a stop signal
that arrives while a child starts is delivered once the child is registered.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from lab.system import tether

ROOT = Path(__file__).resolve().parent.parent
LAB = """
import sys, time
from pathlib import Path
from lab.system import procs
proc = procs.start("worker", ["bash", "-c", "sleep 300 & wait"], log_path=Path(sys.argv[1]))
print(proc.pid, flush=True)
time.sleep(300)
"""


def _group(pgid: int) -> list[psutil.Process]:
    members = []
    for p in psutil.process_iter():
        try:
            if os.getpgid(p.pid) == pgid and p.status() != psutil.STATUS_ZOMBIE:
                members.append(p)
        except (ProcessLookupError, psutil.Error):
            continue
    return members


def test_sigkill_of_the_lab_stops_its_child_and_the_childs_workers(tmp_path: Path) -> None:
    lab = subprocess.Popen(
        [sys.executable, "-c", LAB, str(tmp_path / "log")],
        cwd=ROOT, stdout=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    assert lab.stdout is not None
    pgid = int(lab.stdout.readline())
    deadline = time.monotonic() + 10
    while len(_group(pgid)) < 2 and time.monotonic() < deadline:  # bash and its sleep
        time.sleep(0.05)
    assert len(_group(pgid)) == 2
    lab.kill()
    lab.wait()
    deadline = time.monotonic() + tether.WATCH_GRACE_S + 5
    while _group(pgid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _group(pgid) == []


def test_a_group_whose_leader_pid_was_reused_is_never_touched() -> None:
    other = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        assert tether.ours(other.pid, tether.start_time(other.pid))
        assert not tether.ours(other.pid, "1")  # the pid now names a younger process
        tether.stop_groups({other.pid: "1"}, grace_s=0.2)
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()


def test_the_watcher_reads_what_is_still_held_and_skips_a_cut_line() -> None:
    lines = [
        '{"hold": 11, "leader_start": "5"}\n',
        '{"hold": 12, "leader_start": "6"}\n',
        '{"release": 11}\n',
        '{"command": "c", "argv": ["true"]}\n',
        '{"hold": 13, "leader_st',  # the lab died while writing it
    ]
    groups, commands = tether.watch(iter(lines))
    assert groups == {12: "6"} and commands == {"c": ["true"]}


def test_a_stop_signal_while_a_child_starts_waits_until_it_is_registered() -> None:
    seen: list[str] = []
    previous = signal.signal(signal.SIGHUP, lambda *_: seen.append("handled"))
    try:
        with tether.deferred_stops():
            os.kill(os.getpid(), signal.SIGHUP)
            time.sleep(0.05)
            seen.append("registered")
        assert seen == ["registered", "handled"]
    finally:
        signal.signal(signal.SIGHUP, previous)
