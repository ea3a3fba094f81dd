"""Leftovers of runs whose lab process died (SIGKILL, power cut): found by pid file, then removed.

Each run directory keeps `pids/lab.pid` for the lab itself and one pid file per child it started;
a clean stop removes them. A pid file whose owning lab is gone therefore marks a child that may
still hold a port and load the machine. Before anything is signalled, the pid's start time is
compared with the recorded one, so a process that merely reused the pid is never touched.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import psutil

from lab.record.rundir import write_json
from lab.system import procs

CLEAN_GRACE_S = 3.0


@dataclass(frozen=True)
class Leftover:
    run_dir: Path
    record: procs.PidRecord
    alive: bool  # the recorded process (or its process group) still runs
    path: Path  # the pid file itself (never rebuilt from the recorded name: it could be "../x")

    def describe(self) -> str:
        state = f"pid {self.record.pid} still running" if self.alive else "stale pid file"
        return (
            f"{self.run_dir.name}: {self.record.name} ({state}): {' '.join(self.record.argv)[:120]}"
        )


def _owner_alive(pid_dir: Path) -> bool:
    owner = procs.PidRecord.read(pid_dir / procs.OWNER_PID_FILE)
    return owner is not None and owner.is_running()


def _group_orphaned(record: procs.PidRecord) -> bool:
    """The leader is gone but its process group lives on (workers that outlived their master).

    A pid that is still some process group's id cannot be handed to a new process, so if no process
    has the pid now, the group can only be the one our leader created.
    """
    try:
        os.kill(record.pid, 0)
        return False  # a process with this pid exists: is_running() decides whether it is ours
    except ProcessLookupError:
        return procs.group_alive(record.pid) and _members_younger(record)
    except PermissionError:
        return False


def _members_younger(record: procs.PidRecord) -> bool:
    """Every process of the group started after the recorded leader: a group with an older
    member was not created by our leader (a pid file copied or forged), so it is not ours."""
    for proc in psutil.process_iter(["create_time"]):
        try:
            if os.getpgid(proc.pid) == record.pid and proc.info["create_time"] < (
                record.create_time - 0.05
            ):
                return False
        except (ProcessLookupError, PermissionError):
            continue
    return True


def find(out: Path) -> list[Leftover]:
    """Pid files under out/*/pids/ whose owning lab process is no longer running."""
    found: list[Leftover] = []
    if not out.is_dir():
        return found
    for pid_dir in sorted(out.glob("*/pids")):
        if _owner_alive(pid_dir):
            continue  # another lab is running there right now: its children are not leftovers
        for path in sorted(pid_dir.glob("*.pid")):
            record = procs.PidRecord.read(path)
            if record is None:
                continue
            is_owner = path.name == procs.OWNER_PID_FILE  # dead, or we would not be here
            alive = not is_owner and (record.is_running() or _group_orphaned(record))
            found.append(Leftover(pid_dir.parent, record, alive, path))
    return found


def clean(leftovers: list[Leftover]) -> None:
    """Stop each live leftover's process group, remove the pid files, mark its run interrupted."""
    for item in leftovers:
        if item.alive:
            procs.stop_group(item.record.pid, CLEAN_GRACE_S)
        item.path.unlink(missing_ok=True)
    for run_dir in {item.run_dir for item in leftovers}:
        mark_abandoned(run_dir)


def mark_abandoned(run_dir: Path) -> None:
    """A manifest still saying "running" after its lab died is set to "interrupted"."""
    path = run_dir / "manifest.json"
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError):
        return
    if isinstance(manifest, dict) and manifest.get("status") == "running":
        manifest.update(
            status="interrupted",
            interrupted_by="the lab process died (found later)",
            finished_at=datetime.now(UTC).isoformat(timespec="seconds"),
        )
        write_json(path, manifest)
