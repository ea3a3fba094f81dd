"""Sampling the server's Python stacks during a step's measured window, with py-spy.

Two py-spy recorders follow the server's process and every process it starts (`--subprocesses`:
the workers too) at the same rate through the same window, without pausing it
(`--nonblocking`: the cost on the server is the reading of its memory, measured by
benchmarks/profile_cost.py):

- `wall` (`--idle`): every thread at every tick, on a CPU or not: where the threads are;
- `busy`: only the threads on a CPU: where the CPU goes.

py-spy itself tells a thread on a CPU from one waiting in the kernel; its stacks do not say it, so
the two recorders are how a sample waiting in a blocking call (in `wall`, not in `busy`) is told
from one computing (in both). Each keeps its collapsed stacks (`stack count` per line, the
flame-graph tools' own format), gzipped beside the step's histogram; `lab.verdict.owners` reads
them into shares.
"""

from __future__ import annotations

import gzip
import shutil
import signal
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from lab.record.stacks import parse, stacks_path
from lab.system import procs

RATE_HZ = 47  # samples a second per thread: not a divisor of the lab's 1 s samplers' period
STOP_WAIT_S = 10.0  # py-spy writes its file on SIGINT; a larger tree takes it longer
KINDS = ("wall", "busy")


def pyspy() -> str | None:
    """py-spy's executable: the one installed beside this interpreter, else on PATH."""
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.exists() else shutil.which("py-spy")


@dataclass(frozen=True)
class Stacks:
    """One step's collapsed stacks: each recorder's stack -> samples, and the rate."""

    wall: Counter[str]
    busy: Counter[str]
    rate_hz: int


class Profiler:
    """The two recorders on one process tree, started and stopped with the measured window."""

    def __init__(self, pid: int, dest: Path, rate_hz: int = RATE_HZ) -> None:
        self.pid, self.dest, self.rate_hz = pid, dest, rate_hz
        self.popens: dict[str, subprocess.Popen[bytes]] = {}
        self.problem = ""

    def raw(self, kind: str) -> Path:
        return self.dest.with_name(f"{self.dest.name}.{kind}.txt")

    def start(self) -> None:
        exe = pyspy()
        if exe is None:
            self.problem = "py-spy not installed (pip install py-spy)"
            return
        self.dest.parent.mkdir(parents=True, exist_ok=True)
        for kind in KINDS:
            argv = [exe, "record", "--pid", str(self.pid), "--subprocesses", "--nonblocking"]
            argv += ["--rate", str(self.rate_hz), "--format", "raw", "--nolineno"]
            argv += ["--idle"] if kind == "wall" else []
            log = self.dest.with_name(f"{self.dest.name}.{kind}.log").open("wb")
            with log:
                self.popens[kind] = procs.spawn(
                    [*argv, "-o", str(self.raw(kind))], stdout=log, stderr=subprocess.STDOUT
                )

    def stop(self) -> Stacks | None:
        """Stop both recorders (SIGINT: each writes its file) and keep their stacks gzipped;
        None, with `problem` said, where either did not write them."""
        for popen in self.popens.values():
            if popen.poll() is None:
                popen.send_signal(signal.SIGINT)
        read: dict[str, Counter[str]] = {}
        for kind, popen in self.popens.items():
            try:
                popen.wait(STOP_WAIT_S)
            except subprocess.TimeoutExpired:
                procs.stop_group(popen.pid, grace_s=0)
            read[kind] = self._keep(kind)
        if not self.problem and set(read) != set(KINDS):
            self.problem = "py-spy did not start"
        return None if self.problem else Stacks(read["wall"], read["busy"], self.rate_hz)

    def _keep(self, kind: str) -> Counter[str]:
        raw, log = self.raw(kind), self.dest.with_name(f"{self.dest.name}.{kind}.log")
        said = log.read_text(errors="replace").strip().splitlines() if log.exists() else []
        log.unlink(missing_ok=True)
        if not raw.exists():
            self.problem = f"py-spy {kind}: {said[-1] if said else 'no output'}"
            return Counter()
        text = raw.read_text(errors="replace")
        raw.unlink()
        with gzip.open(stacks_path(self.dest, kind), "wt") as out:
            out.write(text)
        return parse(text)
