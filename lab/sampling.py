"""Resource use of a process tree, sampled once a second while a step is measured."""

from __future__ import annotations

import threading
import time
from typing import Protocol

import psutil

MB = 1024 * 1024


class Meter(Protocol):
    def sample(self) -> tuple[float, float]:
        """(cpu_pct since the last sample, rss_mb now)."""
        ...


class TreeMeter:
    """CPU% (100 = one core) and RSS of a process and all its descendants.

    CPU is counted per pid between samples, so workers that start or exit between samples are
    neither lost nor counted twice.
    """

    def __init__(self, pid: int) -> None:
        self.root = psutil.Process(pid)
        self.cpu_seen: dict[int, float] = {}
        self.last_wall = time.monotonic()
        self.sample()

    def _tree(self) -> list[psutil.Process]:
        try:
            return [self.root, *self.root.children(recursive=True)]
        except psutil.Error:
            return []

    def sample(self) -> tuple[float, float]:
        """(cpu_pct since the last sample, rss_mb now)."""
        cpu_delta, rss = 0.0, 0
        seen: dict[int, float] = {}
        for proc in self._tree():
            try:
                t = proc.cpu_times()
                total = t.user + t.system
                rss += proc.memory_info().rss
            except psutil.Error:
                continue
            seen[proc.pid] = total
            cpu_delta += total - self.cpu_seen.get(proc.pid, total if not self.cpu_seen else 0.0)
        now = time.monotonic()
        wall, self.last_wall = now - self.last_wall, now
        self.cpu_seen = seen
        return round(100 * cpu_delta / max(wall, 1e-9), 1), round(rss / MB, 1)


class HostMeter:
    """CPU% of the whole machine (100 = one core), to see what else competed with the run."""

    def __init__(self) -> None:
        self.last = self._busy()

    @staticmethod
    def _busy() -> tuple[float, float]:
        t = psutil.cpu_times()
        return time.monotonic(), t.user + t.nice + t.system + t.irq + t.softirq + t.steal

    def sample(self) -> tuple[float, float]:
        now = self._busy()
        (w0, b0), (w1, b1) = self.last, now
        self.last = now
        return round(100 * (b1 - b0) / max(w1 - w0, 1e-9), 1), 0.0


class Sampler:
    """Samples a meter every `interval_s` on a thread, between start() and stop()."""

    def __init__(self, meter: Meter | None, interval_s: float = 1.0) -> None:
        self.meter = meter
        self.interval_s = interval_s
        self.cpu: list[float] = []
        self.rss: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        if self.meter is not None:
            self.meter.sample()  # restart the CPU window here
            self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            cpu, rss = self.meter.sample()  # type: ignore[union-attr]
            self.cpu.append(cpu)
            self.rss.append(rss)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def mean_cpu(self) -> float:
        return round(sum(self.cpu) / len(self.cpu), 1) if self.cpu else 0.0

    def peak_rss(self) -> float:
        return max(self.rss, default=0.0)
