"""oha as the engine of a step: `python -m loadgen.oha START_JSON` speaks the lab's generator
protocol (`loadgen.protocol`) on stdout, with oha sending the requests.

Why: oha sends on time in compiled code (`-q RATE --latency-correction`: each request timed from
when its rate limiter made it due), where the lab's own open loop is a Python scheduler whose tail
sat 15-26% above oha's on the same server; in closed loop (`-c USERS` without `-q`: each connection
sends as soon as its answer arrived) it spends a fraction of the CPU per request of the lab's
gevent users, the generator that ran out first on a small machine. Why a process that speaks the
protocol rather than a second step: the lab's step (`lab.run.steps`) drives every engine the same
way (the watchdog, the samplers on this process's tree, the `.hlog`, the record), so the engine is
the one thing that differs.

What it does: oha runs the settle and the window as one (`-z settle + duration`, so its
connections stay warm and the load never pauses), writing every answered request to a SQLite
file (`--db-url`: intended start, send, end, status, length) and its summary as JSON (the
failures it only counts); it waits for every request it sent (`--wait-ongoing-requests-after-
deadline`, bounded by the request timeout). `Measuring` goes out as the window opens, by the
clock; `loadgen.oha.figures` keeps the window's requests (due inside it, by oha's own clock) and
turns them into the lab's figures (`loadgen.oha.summary`: the step's `Done`).
Several processes (`Start.generators`) split the rate and the cap (closed loop: the users), one per
generator core, each on one thread (`--worker-threads 1`), pinned there; one process keeps oha's
own default threads, as oha alone runs (with one thread on a core shared with other work, the 800
req/s p99 of `benchmarks/latency_fidelity.py` came out 1.42x and 1.48x oha alone's, medians of 4
and 8 rounds; a core's time is shared out per thread). oha runs in this process's group, so the
lab's stop of the group (and its tether) stops them with it. An oha that exits non-zero, is killed,
or outlives its bound is a `Failed` with the reason, never a result.
"""

from __future__ import annotations

import json
import math
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import psutil

from lab.record import hist
from loadgen.oha import figures, summary
from loadgen.protocol import Failed, Histogram, Measuring, Message, Sample, Start, encode
from loadgen.shares import spread

END_GRACE_S = 10.0  # beyond the window and the request timeout: oha's start, its store, exit
POLL_S = 0.05
COLUMNS = "start_latency_correction, start, end, status, len_bytes"


class OhaFailed(Exception):
    """oha did not give a result: why, in one line."""


@dataclass(frozen=True)
class Share:
    """One oha process's part of the step: its rate (0: closed loop), its connections, its
    core."""

    index: int
    rate_rps: float
    cap: int
    cpu: int | None


def shares_of(start: Start) -> list[Share]:
    """The rate and the cap (closed loop: the users, each a connection) split evenly over
    `generators` processes, one core each."""
    n = max(1, start.generators)
    caps = spread(start.users if start.rate_rps is None else start.max_outstanding, n)
    rate = (start.rate_rps or 0.0) / n
    cpus = start.generator_cpus
    return [Share(i, rate, caps[i], cpus[i % len(cpus)] if cpus else None) for i in range(n)]


def argv(start: Start, share: Share, seconds: float, files: tuple[Path, Path]) -> list[str]:
    """oha's command line for one share over `seconds`, its records into `files` (database,
    JSON)."""
    out = [start.engine_path, "--no-tui"]
    if start.generators > 1:  # one process per core: one thread each (else oha's own default)
        out += ["--worker-threads", "1"]
    if start.rate_rps is not None:  # open loop; closed: each connection sends on its answer
        out += ["--latency-correction", "-q", f"{share.rate_rps:.6g}"]
    out += ["-c", str(share.cap)]
    out += ["-z", f"{max(1, round(seconds * 1000))}ms", "-t", f"{round(start.timeout_s * 1000)}ms"]
    out += ["-m", start.method]
    for name, value in start.headers.items():
        out += ["-H", f"{name}: {value}"]
    if start.body is not None and start.method != "GET":
        out += ["-d", start.body]
    db, summary = files
    out += ["--wait-ongoing-requests-after-deadline", "--db-url", str(db)]
    out += ["--output-format", "json", "-o", str(summary)]
    return [*out, start.base_url.rstrip("/") + start.path]


class Fleet:
    """The oha processes of one phase, and their CPU."""

    def __init__(self, start: Start, seconds: float, workdir: Path) -> None:
        self.shares = shares_of(start)
        self.files = [_files(workdir, s) for s in self.shares]
        self.errs = [workdir / f"oha-{s.index}.err" for s in self.shares]
        self.procs: list[subprocess.Popen[bytes]] = []
        for share, files, err in zip(self.shares, self.files, self.errs, strict=True):
            with err.open("wb") as stderr:
                self.procs.append(
                    subprocess.Popen(
                        argv(start, share, seconds, files),
                        stdin=subprocess.DEVNULL,
                        stdout=subprocess.DEVNULL,
                        stderr=stderr,
                        preexec_fn=_pin(share.cpu),
                    )
                )
        # oha's processes, then this one: its polling is the generator's work too
        self.meters = [*(psutil.Process(p.pid) for p in self.procs), psutil.Process()]
        self.cpu_s = [0.0] * len(self.meters)
        self.began = time.monotonic()

    def lap(self) -> float:
        """CPU of every process since the last lap, 100 = one core."""
        before = sum(self.cpu_s)
        for i, meter in enumerate(self.meters):
            try:
                t = meter.cpu_times()
                self.cpu_s[i] = t.user + t.system
            except psutil.Error:
                pass  # exited: its last reading stands
        return 100 * (sum(self.cpu_s) - before)

    def running(self) -> bool:
        return any(p.poll() is None for p in self.procs)

    def kill(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            p.wait()

    def check(self) -> None:
        """Every process ended well, or OhaFailed with the first one's reason."""
        for p, err in zip(self.procs, self.errs, strict=True):
            if p.returncode != 0:
                tail = err.read_text(errors="replace").strip().splitlines()[-3:]
                how = f"killed by signal {-p.returncode}" if p.returncode < 0 else "exited"
                code = "" if p.returncode < 0 else f" {p.returncode}"
                raise OhaFailed(f"oha {how}{code}: {' / '.join(tail) or 'no output'}")


def _files(workdir: Path, share: Share) -> tuple[Path, Path]:
    return workdir / f"oha-{share.index}.db", workdir / f"oha-{share.index}.json"


def _pin(cpu: int | None) -> Any:
    if cpu is None:
        return None
    return lambda: os.sched_setaffinity(0, {cpu})


def emit(message: Message) -> None:
    sys.stdout.write(encode(message) + "\n")
    sys.stdout.flush()


def watch(fleet: Fleet, settle_s: float, window_s: float, bound_s: float) -> list[float]:
    """Wait for the fleet to end (at most `bound_s`): a `Sample` each second of the settle, then
    `Measuring` as the window opens and a `Sample` each second of it; returns the CPU of each of
    the window's seconds."""
    cpu: list[float] = []
    ticks = [("settle", float(t), float(t)) for t in range(1, math.ceil(settle_s - 1e-9))]
    ticks.append(("open", settle_s, 0.0))
    ends = [min(float(t), window_s) for t in range(1, math.ceil(window_s - 1e-9) + 1)]
    ticks += [("measure", settle_s + e, e) for e in ends]
    last = 0.0
    while fleet.running():
        elapsed = time.monotonic() - fleet.began
        if elapsed > bound_s:
            fleet.kill()
            raise OhaFailed(f"oha still running {bound_s:.0f} s after it started: stopped")
        while ticks and elapsed >= ticks[0][1]:
            phase, at, t = ticks.pop(0)
            load = round(fleet.lap() / max(at - last, 1e-9), 1)
            last = at
            if phase == "open":
                emit(Measuring(datetime.now(UTC).isoformat(timespec="milliseconds")))
                continue
            cpu += [load] if phase == "measure" else []
            emit(Sample(phase, round(t, 2), load, 0, 0))
        time.sleep(POLL_S)
    fleet.check()
    return cpu


def read(db: Path, summary: Path) -> tuple[np.ndarray, dict[str, int], float]:
    """One process's rows (intended, sent, end, status, length; seconds from its start), its
    counted failures by message, and its own total time."""
    doc = json.loads(summary.read_text())
    errors = {str(k): int(v) for k, v in (doc.get("errorDistribution") or {}).items()}
    total = float((doc.get("summary") or {}).get("total") or 0.0)
    rows: list[Any] = []
    if db.exists():
        with sqlite3.connect(db) as conn:
            rows = conn.execute(f"SELECT {COLUMNS} FROM oha").fetchall()  # noqa: S608
    data = np.array(rows, dtype=float).reshape(-1, 5)
    data[:, 0] = np.where(np.isnan(data[:, 0]), data[:, 1], data[:, 0])  # uncorrected: sent
    return data, errors, total


def window_runs(fleet: Fleet, spec: figures.Spec) -> list[figures.OhaRun]:
    """Every process's records as `figures` reads them."""
    runs = []
    for share, files, cpu_s in zip(
        fleet.shares, fleet.files, fleet.cpu_s[: len(fleet.shares)], strict=True
    ):
        data, errors, total = read(*files)
        intended, sent, end, status, size = data.T
        reconnected = 0
        if spec.closed:  # nothing scheduled: the rows sent in the window, and their counted share
            errors, stale = figures.reconnects(errors, len(status))
            reconnected = spec.closed_room(0, stale)
            due = spec.closed_room(int((intended >= spec.settle_s).sum()), sum(errors.values()))
        else:  # its rate limiter's arrivals at i / q: those due inside the window
            q = share.rate_rps
            whole = spec.settle_s + spec.window_s
            due = math.ceil(whole * q - 1e-9) - math.ceil(spec.settle_s * q - 1e-9)
        runs.append(
            figures.OhaRun(
                intended,
                sent,
                end,
                status,
                size,
                errors=errors,
                total_s=total,
                scheduled=due,
                source=f"oha-{share.index}",
                rate_rps=share.rate_rps,
                cpu_pct=round(100 * cpu_s / max(spec.settle_s + spec.window_s, 1e-9), 1),
                cpus=(share.cpu,) if share.cpu is not None else (),
                reconnects=reconnected,
            )
        )
    return runs


def run(start: Start, workdir: Path) -> None:
    """The step: settle and window on one fleet, then the figures; every message on stdout."""
    whole_s = start.settle_s + start.duration_s
    fleet = Fleet(start, whole_s, workdir)
    began = datetime.now(UTC) + timedelta(seconds=start.settle_s)
    cpu = watch(fleet, start.settle_s, start.duration_s, whole_s + start.timeout_s + END_GRACE_S)
    expected = start.expected_body
    spec = figures.Spec(
        start.rate_rps or 0.0,
        start.settle_s,
        start.duration_s,
        start.timeout_s,
        len(expected.encode()) if expected is not None else None,
        closed=start.rate_rps is None,
    )
    started_at = began.isoformat(timespec="milliseconds")
    try:
        runs = window_runs(fleet, spec)
    except (OSError, ValueError, KeyError, sqlite3.Error) as exc:  # ended well, wrote no records
        raise OhaFailed(f"oha's records could not be read: {exc}") from None
    done, tallied = summary.done(runs, spec, started_at, cpu)
    for begin, end, h, drain in figures.intervals(tallied, start.duration_s):
        emit(Histogram(round(begin, 3), round(end, 3), hist.encode(h), "", drain))
    emit(done)


def check(start: Start) -> str | None:
    """Why this engine cannot run `start`, or None."""
    if start.rate_rps is not None and start.rate_rps <= 0:
        return f"an open-loop rate of {start.rate_rps:g} req/s: it must be > 0"
    if start.rate_rps is None and start.users <= 0:
        return f"a closed loop of {start.users} users: it needs 1 or more"
    if not start.engine_path or not os.access(start.engine_path, os.X_OK):
        return f"oha not found at {start.engine_path!r}"
    if start.mix or start.remote_generators or start.login or start.arrival != "constant":
        return "a mix, a login, remote generators or Poisson arrivals need the lab's engine"
    return None


def main(args: Sequence[str]) -> int:
    try:
        start = Start.from_json(args[1])
    except (IndexError, ValueError, TypeError) as exc:
        emit(Failed(f"bad start message: {exc}"))
        return 2
    if (why := check(start)) is not None:
        emit(Failed(why))
        return 1
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # the work directory is removed
    with tempfile.TemporaryDirectory(prefix="lab-oha-") as workdir:
        try:
            run(start, Path(workdir))
        except OhaFailed as exc:
            emit(Failed(str(exc)))
            return 1
    return 0
