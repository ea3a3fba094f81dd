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
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import psutil

from lab.record import hist
from loadgen.oha import figures, summary, wire
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


def local_count(start: Start) -> int:
    """oha processes on this machine: the step's `generators`, at least one unless remote
    generators take the whole step (an open loop's automatic count may leave none here)."""
    return start.generators if start.remote_generators else max(1, start.generators)


def shares_of(start: Start) -> list[Share]:
    """The rate and the cap (closed loop: the users, each a connection) split evenly over the
    step's processes, the `generators` here first (one core each), then one per remote
    generator."""
    local = local_count(start)
    n = local + start.remote_generators
    caps = spread(start.users if start.rate_rps is None else start.max_outstanding, n)
    rate = (start.rate_rps or 0.0) / n
    cpus = start.generator_cpus
    return [
        Share(i, rate, caps[i], cpus[i % len(cpus)] if cpus and i < local else None)
        for i in range(n)
    ]


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

    def __init__(self, start: Start, shares: list[Share], seconds: float, workdir: Path) -> None:
        self.shares = shares
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
    """Wait for the fleet to end (at most `bound_s`; a fleet of none here, every share remote:
    the settle and the window): a `Sample` each second of the settle, then `Measuring` as the
    window opens and a `Sample` each second of it; returns the CPU of each of the window's
    seconds."""
    cpu: list[float] = []
    ticks = [("settle", float(t), float(t)) for t in range(1, math.ceil(settle_s - 1e-9))]
    ticks.append(("open", settle_s, 0.0))
    ends = [min(float(t), window_s) for t in range(1, math.ceil(window_s - 1e-9) + 1)]
    ticks += [("measure", settle_s + e, e) for e in ends]
    last = 0.0
    while fleet.running() or (not fleet.procs and ticks):
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


def spec_of(start: Start) -> figures.Spec:
    """What the step asks for, as oha's records are read."""
    expected = start.expected_body
    return figures.Spec(
        start.rate_rps or 0.0,
        start.settle_s,
        start.duration_s,
        start.timeout_s,
        len(expected.encode()) if expected is not None else None,
        closed=start.rate_rps is None,
    )


def bound_s(start: Start) -> float:
    """How long one oha process may run: the settle, the window, a request's timeout, its exit."""
    return start.settle_s + start.duration_s + start.timeout_s + END_GRACE_S


@dataclass
class Local:
    """What the shares run here gave: their records, the window's CPU and when it opened."""

    runs: list[figures.OhaRun]
    cpu: list[float]
    started_at: str


def local_runs(start: Start, shares: list[Share], workdir: Path) -> Local:
    """These shares run here, settle and window as one."""
    began = datetime.now(UTC) + timedelta(seconds=start.settle_s)
    fleet = Fleet(start, shares, start.settle_s + start.duration_s, workdir)
    cpu = watch(fleet, start.settle_s, start.duration_s, bound_s(start))
    try:
        runs = window_runs(fleet, spec_of(start))
        return Local(runs, cpu, began.isoformat(timespec="milliseconds"))
    except (OSError, ValueError, KeyError, sqlite3.Error) as exc:  # ended well, wrote no records
        raise OhaFailed(f"oha's records could not be read: {exc}") from None


def run(start: Start, workdir: Path) -> None:
    """The step: settle and window on one fleet (its remote shares on `lab generator`s, each
    running its own oha, `loadgen.oha.remote`), then the figures; every message on stdout."""
    shares = shares_of(start)
    local, far = shares[: local_count(start)], shares[local_count(start) :]
    if far:
        from loadgen.oha import remote  # locust's master: only where generators are remote

        try:
            with remote.Far(start) as fleet:
                fleet.send(start, [(s.rate_rps, s.cap) for s in far])
                here = local_runs(start, local, workdir)
                here.runs += fleet.runs(start.timeout_s + END_GRACE_S)
        except remote.RemoteFailed as exc:
            raise OhaFailed(str(exc)) from None
    else:
        here = local_runs(start, local, workdir)
    spec = spec_of(start)
    done, tallied = summary.done(here.runs, spec, here.started_at, here.cpu)
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
    if start.mix or start.login or start.arrival != "constant":
        return "a mix, a login or Poisson arrivals need the lab's engine"
    return None


def here(start: Start) -> Start:
    """A remote share's start with this machine's oha: the path the lab sent where it runs
    here, else oha on PATH or where cargo installs it."""
    if start.engine_path and os.access(start.engine_path, os.X_OK):
        return start
    cargo = Path.home() / ".cargo" / "bin" / "oha"
    found = shutil.which("oha") or (str(cargo) if os.access(cargo, os.X_OK) else "")
    return replace(start, engine_path=found)


def share(start: Start, out: Path, workdir: Path) -> None:
    """A remote generator's share (`--share OUT`): run at the step's common moment, its records
    written to OUT for the master (`loadgen.oha.wire`)."""
    time.sleep(max(0.0, start.begin_at - time.time()))
    ran = local_runs(start, shares_of(start), workdir)
    out.write_bytes(wire.encode(ran.runs))


def main(args: Sequence[str]) -> int:
    """`START` (the step, its messages on stdout) or `--share OUT START` (a remote share, its
    records into OUT, its failure on stderr)."""
    out = Path(args[2]) if len(args) > 2 and args[1] == "--share" else None
    try:
        start = Start.from_json(args[-1] if out is not None else args[1])
    except (IndexError, ValueError, TypeError) as exc:
        emit(Failed(f"bad start message: {exc}"))
        return 2
    start = here(start) if out is not None else start
    if (why := check(start)) is not None:
        return _failed(why, out)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # the work directory is removed
    with tempfile.TemporaryDirectory(prefix="lab-oha-") as workdir:
        try:
            if out is None:
                run(start, Path(workdir))
            else:
                share(start, out, Path(workdir))
        except OhaFailed as exc:
            return _failed(str(exc), out)
    return 0


def _failed(why: str, out: Path | None) -> int:
    """The step's `Failed`, or a remote share's reason on stderr (its worker sends it on)."""
    if out is None:
        emit(Failed(why))
    else:
        print(why, file=sys.stderr)
    return 1
