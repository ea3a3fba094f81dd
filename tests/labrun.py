"""A `lab run` subprocess watched from outside, for the fault-injection tests.

It runs in its own session with its output in a file, and remembers every child it saw by pid
file, so a test can strike at the right moment and then check that nothing the run started
survived.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import psutil

from lab.system import procs
from tests.helpers import lab_cli, step_rows


def read_jsonl(path: Path) -> list[dict]:
    """The raw objects of a run file, as any reader would see them (missing file: none)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


class LabRun:
    """A `lab run` subprocess and its run directory."""

    def __init__(self, out: Path, *args: str) -> None:
        self.out = out
        self.log = (out / "lab-output.txt").open("w")
        self.popen = subprocess.Popen(
            lab_cli("run", "--out", str(out), *args),
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            text=True,
        )
        self.seen_pids: set[tuple[int, float]] = set()  # every child seen, to check cleanup

    @property
    def dir(self) -> Path:
        runs = [p for p in self.out.iterdir() if p.is_dir()]
        return runs[0] if runs else self.out / "none-yet"

    def steps(self) -> list[dict]:
        return step_rows(self.dir)

    def pid(self, name: str) -> procs.PidRecord | None:
        record = procs.PidRecord.read(self.dir / "pids" / f"{name}.pid")
        if record is not None:
            self.seen_pids.add((record.pid, record.create_time))
        return record

    def wait_until(self, what: str, condition: Callable[[], object], timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if condition():
                return
            assert self.popen.poll() is None, f"lab exited before {what}: {self.output()}"
            time.sleep(0.05)
        raise AssertionError(f"timed out waiting for {what}: {self.output()}")

    def wait_measuring(self, model: str, step_index: int) -> procs.PidRecord:
        """Block until step `step_index` of the run is in its measured window; return its server."""
        self.wait_until(
            f"step {step_index} running",
            lambda: len(self.steps()) == step_index and self.pid("loadgen") and self.pid(model),
        )
        gen = self.pid("loadgen")
        assert gen is not None
        self.wait_until("load flowing", lambda: connected(gen.pid))
        time.sleep(1.0)  # settle (0.5 s) is over: half a second into the measured window
        record = self.pid(model)
        assert record is not None
        return record

    def finish(self, timeout_s: float = 120) -> int:
        code = self.popen.wait(timeout=timeout_s)
        self.log.close()
        return code

    def output(self) -> str:
        if not self.log.closed:
            self.log.flush()
        return (self.out / "lab-output.txt").read_text()

    def manifest(self) -> dict:
        return json.loads((self.dir / "manifest.json").read_text())

    def kill(self) -> None:
        if self.popen.poll() is None:
            os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait()


def connected(pid: int) -> bool:
    """The load generator's users hold connections: the step's settle phase has begun (on oha,
    the connections are its oha child's)."""
    try:
        root = psutil.Process(pid)
        tree = [root, *root.children(recursive=True)]
    except psutil.Error:
        return False
    for proc in tree:
        try:
            if any(c.status == "ESTABLISHED" for c in proc.net_connections("tcp")):
                return True
        except psutil.Error:
            continue
    return False
