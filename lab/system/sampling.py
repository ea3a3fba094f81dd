"""Resource use of a process tree, sampled once a second while a step is measured.

Memory is read two ways. RSS summed over a tree counts a page shared by N processes N times: a
forked master and its workers share their code and the app's imported modules, so summed RSS
makes a pre-fork server look dearer than a one-process server using the same pages. PSS
(proportional set size, /proc/PID/smaps_rollup) splits each shared page between the processes
that map it, so PSS summed over the tree counts every page once, as the kernel charges the
tree: that is the figure the lab compares models on (`server_pss_mb`).
"""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import psutil

MB = 1024 * 1024


@dataclass(frozen=True)
class Reading:
    """One sample of a meter (memory 0.0 where the meter has none)."""

    cpu_pct: float  # since the last sample, 100 = one core
    rss_mb: float = 0.0  # RSS summed: a shared page counted once per process mapping it
    pss_mb: float = 0.0  # each page counted once (PSS summed; a container's cgroup count)


class Meter(Protocol):
    def sample(self) -> Reading: ...


class TreeMeter:
    """CPU% (100 = one core), RSS and PSS of a process and all its descendants.

    CPU is counted per pid between samples, so workers that start or exit between samples are
    neither lost nor counted twice. A process whose smaps cannot be read (another user's) counts
    its RSS as its PSS, the most it could be.
    """

    def __init__(self, pid: int) -> None:
        self.root = psutil.Process(pid)
        self.cpu_seen: dict[int, float] = {}
        self.cpu_s = 0.0  # CPU seconds of the tree counted since the first sample
        self.last_wall = time.monotonic()
        self.sample()

    def _tree(self) -> list[psutil.Process]:
        try:
            return [self.root, *self.root.children(recursive=True)]
        except psutil.Error:
            return []

    def sample(self) -> Reading:
        cpu_delta, rss, pss = 0.0, 0, 0
        seen: dict[int, float] = {}
        for proc in self._tree():
            try:
                t = proc.cpu_times()
                total = t.user + t.system
                used = proc.memory_info().rss
                pss += _pss(proc, used)
                rss += used
            except psutil.Error:
                continue
            seen[proc.pid] = total
            cpu_delta += total - self.cpu_seen.get(proc.pid, total if not self.cpu_seen else 0.0)
        now = time.monotonic()
        wall, self.last_wall = now - self.last_wall, now
        self.cpu_seen = seen
        self.cpu_s += cpu_delta
        return Reading(
            round(100 * cpu_delta / max(wall, 1e-9), 1), round(rss / MB, 1), round(pss / MB, 1)
        )


def _pss(proc: psutil.Process, rss: int) -> int:
    try:
        return int(proc.memory_full_info().pss)
    except psutil.AccessDenied:
        return rss


@dataclass(frozen=True)
class Accounted:
    """The machine's busy CPU over one window, and what of it was the run's (100 = one core)."""

    host_pct: float  # every core's busy time: user, nice, system, irq, softirq, steal
    run_pct: float  # the lab's own process and every process it started
    softirq_pct: float  # kernel network work, charged to no process

    @property
    def others_pct(self) -> float:
        """What processes outside the run used: the rest, less the kernel's network work."""
        return round(max(self.host_pct - self.run_pct - self.softirq_pct, 0.0), 1)


class HostMeter:
    """CPU% of the whole machine (100 = one core), read per core, to see what else competed with
    the run and whether a core the apparatus runs on was saturated.

    Busy time includes irq, softirq and steal: kernel network work (softirq) is charged to no
    process, so it is kept apart (`softirq`) instead of being blamed on "other processes". The
    apparatus's cores are the cores it is pinned to; unpinned, the core each of its processes
    last ran on at each sample (`cpu_num`), so a busy core it shares is seen either way.
    """

    def __init__(
        self,
        apparatus_cores: tuple[int, ...] = (),
        apparatus_pids: tuple[int, ...] = (),
        server_pid: int = 0,
    ) -> None:
        self.cores = apparatus_cores
        self.procs = [p for p in map(_process, apparatus_pids) if p is not None]
        self.server = [p for p in (_process(server_pid),) if server_pid and p is not None]
        self.softirq: list[float] = []  # % of one core, per sample
        self.apparatus: list[float] = []  # busy % of the busiest apparatus core, per sample
        # % of the time the apparatus process that waited most (the generator or one of its
        # worker processes, or the upstream) was runnable but not running, per sample; and the
        # same for the server's processes (its master and workers)
        self.waited: list[float] = []
        self.server_waited: list[float] = []
        # busy % of the server's own cores summed (100 = one core), where they are its alone
        # (pinned apart from the apparatus's); none where they are not
        self.server_cores_busy: list[float] = []
        self.server_cores = self._server_cores()
        self.before_others = _cpu_by_pid()  # every process's CPU seconds as the window opened
        self.opened = time.monotonic()
        self.last = self._read()
        self.opened_at = self.last  # the cores' busy seconds as the window opened
        self.run_before = self._run_cpu()
        self.last_wait = _waits(self.procs)
        self.last_server_wait = _waits(self.server)

    @staticmethod
    def _read() -> tuple[float, list[tuple[float, float]]]:
        """(now, [(busy seconds, softirq seconds) per core])."""
        per_core = psutil.cpu_times(percpu=True)
        busy = [
            (t.user + t.nice + t.system + t.irq + t.softirq + t.steal, t.softirq) for t in per_core
        ]
        return time.monotonic(), busy

    def _apparatus_cores(self) -> set[int]:
        if self.cores:
            return set(self.cores)
        found = set()
        for proc in self.procs:
            try:
                found.add(proc.cpu_num())
            except psutil.Error:
                continue
        return found

    def _server_cores(self) -> tuple[int, ...]:
        """The cores the server is pinned to, where none of the apparatus's is among them."""
        try:
            cores = tuple(self.server[0].cpu_affinity() or ()) if self.server else ()
        except psutil.Error:
            return ()
        total = psutil.cpu_count() or 0
        return (
            () if not self.cores or set(cores) & set(self.cores) or len(cores) >= total else cores
        )

    def clear(self) -> None:
        """Forget what was sampled before the measured window."""
        self.before_others, self.opened = _cpu_by_pid(), time.monotonic()
        self.opened_at, self.run_before = self._read(), self._run_cpu()
        self.server_cores_busy.clear()
        self.softirq.clear()
        self.apparatus.clear()
        self.waited.clear()
        self.server_waited.clear()

    def sample(self) -> Reading:
        now = self._read()
        (w0, b0), (w1, b1) = self.last, now
        self.last = now
        wall = max(w1 - w0, 1e-9)
        busy = [100 * (x1[0] - x0[0]) / wall for x0, x1 in zip(b0, b1, strict=False)]
        softirq = sum(100 * (x1[1] - x0[1]) / wall for x0, x1 in zip(b0, b1, strict=False))
        mine = [busy[c] for c in self._apparatus_cores() if c < len(busy)]
        self.softirq.append(round(softirq, 1))
        self.apparatus.append(round(min(max(mine, default=0.0), 100.0), 1))
        if self.server_cores:
            self.server_cores_busy.append(round(sum(busy[c] for c in self.server_cores), 1))
        wait, server = _waits(self.procs), _waits(self.server)
        self.waited.append(_most(wait, self.last_wait, wall))
        self.server_waited.append(_most(server, self.last_server_wait, wall))
        self.last_wait, self.last_server_wait = wait, server
        return Reading(round(sum(busy), 1))

    def _run_cpu(self) -> dict[int, float]:
        """CPU seconds of every process of the run: the lab's own process and all it started
        (the server, generators, upstream, front, the databases it runs for an app, what its
        samplers spawn): each pid's own under the pid, its reaped children's under -pid."""
        out: dict[int, float] = {}
        for proc in _trees([psutil.Process(), *self.server, *self.procs]):
            with contextlib.suppress(psutil.Error):
                t = proc.cpu_times()
                out[proc.pid] = t.user + t.system
                out[-proc.pid] = t.children_user + t.children_system
        return out

    def accounted(self) -> Accounted:
        """The whole machine's busy time since `clear`, and the run's share of it, over exactly
        that window: what a reader can check against /proc over the same seconds. A process of
        the run that exited in the window counts through its parent's reaped children's time
        (the lab's own samplers' short commands, a database's backends), less what it had used
        before the window."""
        (w0, b0), (w1, b1) = self.opened_at, self._read()
        wall = max(w1 - w0, 1e-9)
        host = sum(x1[0] - x0[0] for x0, x1 in zip(b0, b1, strict=False))
        softirq = sum(x1[1] - x0[1] for x0, x1 in zip(b0, b1, strict=False))
        now, before = self._run_cpu(), self.run_before
        run = sum(cpu - before.get(pid, 0.0) for pid, cpu in now.items())
        run -= sum(cpu for key, cpu in before.items() if abs(key) not in now)
        pct = 100 / wall
        return Accounted(
            round(host * pct, 1), round(max(run, 0.0) * pct, 1), round(softirq * pct, 1)
        )

    def others(self, least_pct: float = 10.0, most: int = 3) -> dict[str, float]:
        """The processes outside the run (the lab's own tree: the server, generators, upstream,
        nginx) that used `least_pct` of a core or more since `clear`, where they could run on
        the server's cores (their affinity meets its), busiest first: "name (pid)" -> % of a
        core. What took a waiting server's CPU, named rather than inferred."""
        if not self.server:  # a server in a container: its processes are no one's "others"
            return {}
        wall = max(time.monotonic() - self.opened, 1e-9)
        run = {p.pid for p in _trees([psutil.Process(), *self.server, *self.procs])}
        try:
            mine = set(self.server[0].cpu_affinity() or ()) if self.server else set()
        except psutil.Error:
            mine = set()
        used = []
        for pid, (name, cpu_s, cores) in _cpu_by_pid().items():
            pct = 100 * (cpu_s - self.before_others.get(pid, (name, 0.0, cores))[1]) / wall
            if pid not in run and pct >= least_pct and (not mine or mine & cores):
                used.append((round(pct), f"{name} ({pid})"))
        return {who: float(pct) for pct, who in sorted(used, reverse=True)[:most]}


def _cpu_by_pid() -> dict[int, tuple[str, float, set[int]]]:
    """Every process this user can read: its name, CPU seconds so far and allowed cores."""
    out = {}
    for proc in psutil.process_iter(["name", "cpu_times", "cpu_affinity"]):
        info = proc.info
        times, cores = info.get("cpu_times"), info.get("cpu_affinity")
        if times is not None:
            out[proc.pid] = (info.get("name") or "?", times.user + times.system, set(cores or ()))
    return out


def _waits(roots: list[psutil.Process]) -> dict[int, float]:
    """Seconds each process of the trees under `roots` spent runnable but waiting for a CPU
    (schedstat; its threads' waits added: a thread that waits holds up what the process does)."""
    waits = {}
    for proc in _trees(roots):
        total = 0.0
        for task in Path(f"/proc/{proc.pid}/task").glob("*/schedstat"):
            with contextlib.suppress(OSError, ValueError, IndexError):
                total += int(task.read_text().split()[1]) / 1e9
        waits[proc.pid] = total
    return waits


def _trees(roots: list[psutil.Process]) -> list[psutil.Process]:
    found = []
    for root in roots:
        found.append(root)
        with contextlib.suppress(psutil.Error):
            found.extend(root.children(recursive=True))
    return found


def _most(now: dict[int, float], before: dict[int, float], wall: float) -> float:
    """The largest share of `wall` (%) any one process waited since the last sample."""
    most = max((s - before.get(pid, s) for pid, s in now.items()), default=0.0)
    return round(100 * max(most, 0.0) / wall, 1)


def _process(pid: int) -> psutil.Process | None:
    try:
        return psutil.Process(pid)
    except psutil.Error:
        return None


class Sampler:
    """Samples a meter every `interval_s` on a thread, between start() and stop()."""

    def __init__(self, meter: Meter | None, interval_s: float = 1.0) -> None:
        self.meter = meter
        self.interval_s = interval_s
        self.cpu: list[float] = []
        self.rss: list[float] = []
        self.pss: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        if self.meter is not None:
            self.meter.sample()  # restart the CPU window here
            self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            reading = self.meter.sample()  # type: ignore[union-attr]
            self.cpu.append(reading.cpu_pct)
            self.rss.append(reading.rss_mb)
            self.pss.append(reading.pss_mb)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def mean_cpu(self) -> float:
        return round(sum(self.cpu) / len(self.cpu), 1) if self.cpu else 0.0

    def peak_rss(self) -> float:
        return max(self.rss, default=0.0)

    def peak_pss(self) -> float:
        return max(self.pss, default=0.0)
