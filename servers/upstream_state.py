"""The upstream's counters and settings, shared by all of its processes through one mmap.

Why: when one core is not enough the upstream runs several processes on one port (SO_REUSEPORT),
and `/stats` must still tell the truth about all of them whichever process answers it. Each
process writes only its own counter slot, so no lock is needed; readers sum the slots. `/config`
writes the shared settings and bumps a version that every process checks before each request.
"""

from __future__ import annotations

import asyncio
import mmap
import random
import struct
import time
from dataclasses import dataclass

from servers.upstream_model import DISTRIBUTIONS, Delay, Faults
from servers.upstream_routes import RouteCounts, Rule

# Per process slot: served, inflight, max_inflight seen (of the total), served at the last reset,
# then its event loop's lateness since the last reset: summed and largest (µs), and ticks.
SERVED, INFLIGHT, MAX, BASE, LAG_SUM, LAG_MAX, TICKS = range(7)
SLOT_INTS = 7
LAG_TICK_S = 0.01  # how often each process checks how late its event loop wakes
SETTINGS = struct.Struct("<q5d")  # version, delay_ms, distribution index, error, stall rate, ms


@dataclass(frozen=True)
class Settings:
    delay: Delay
    faults: Faults


class SharedState:
    """Created before the processes fork; each process then uses its own `slot`."""

    def __init__(self, processes: int, settings: Settings, rules: tuple[Rule, ...] = ()) -> None:
        self.processes = processes
        self.rules = rules  # per-route answers (servers.upstream_routes), fixed at start
        self.routes = RouteCounts(processes)  # calls per route
        self.mem = mmap.mmap(-1, SETTINGS.size + 8 * SLOT_INTS * processes)
        self.ints = memoryview(self.mem)[SETTINGS.size :].cast("q")
        self.version = 0
        self.settings = settings
        self.write_settings(settings)

    def begin(self, slot: int) -> None:
        """A request starts: count it in flight and raise the high-water mark if the total did."""
        ints = self.ints
        base = slot * SLOT_INTS
        ints[base + INFLIGHT] += 1
        total = sum(ints[i * SLOT_INTS + INFLIGHT] for i in range(self.processes))
        if total > ints[base + MAX]:
            ints[base + MAX] = total

    def end(self, slot: int) -> None:
        base = slot * SLOT_INTS
        self.ints[base + INFLIGHT] -= 1
        self.ints[base + SERVED] += 1

    def _column(self, field: int) -> list[int]:
        return [self.ints[i * SLOT_INTS + field] for i in range(self.processes)]

    def lag(self, slot: int, late_s: float) -> None:
        """One tick of this process's event loop, `late_s` after it was due."""
        base, us = slot * SLOT_INTS, round(late_s * 1e6)
        self.ints[base + LAG_SUM] += us
        self.ints[base + TICKS] += 1
        if us > self.ints[base + LAG_MAX]:
            self.ints[base + LAG_MAX] = us

    def stats(self) -> dict[str, object]:
        served = sum(s - b for s, b in zip(self._column(SERVED), self._column(BASE), strict=True))
        inflight = sum(self._column(INFLIGHT))
        ticks = sum(self._column(TICKS))
        return {
            "served": served,
            "inflight": inflight,
            "max_inflight": max(self._column(MAX)),
            "loop_lag_mean_ms": round(sum(self._column(LAG_SUM)) / ticks / 1000, 3) if ticks else 0,
            "loop_lag_max_ms": round(max(self._column(LAG_MAX)) / 1000, 3),
            "routes": self.routes.stats(),
        }

    def reset(self) -> dict[str, object]:
        """Start a measurement window: the high-water mark restarts from what is in flight."""
        self.routes.reset()
        inflight = sum(self._column(INFLIGHT))
        for i in range(self.processes):
            base = i * SLOT_INTS
            self.ints[base + BASE] = self.ints[base + SERVED]
            self.ints[base + MAX] = inflight
            for lag in (LAG_SUM, LAG_MAX, TICKS):
                self.ints[base + lag] = 0
        return self.stats()

    def write_settings(self, settings: Settings) -> None:
        version = SETTINGS.unpack_from(self.mem, 0)[0] + 1
        d, f = settings.delay, settings.faults
        index = DISTRIBUTIONS.index(d.distribution)
        SETTINGS.pack_into(
            self.mem, 0, version, d.mean_ms, index, f.error_rate, f.stall_rate, f.stall_ms
        )

    def current(self) -> Settings:
        """This process's view of the settings, re-read only when another process changed them."""
        version, mean, index, error, stall, stall_ms = SETTINGS.unpack_from(self.mem, 0)
        if version != self.version:
            self.version = version
            self.settings = Settings(
                Delay(mean, DISTRIBUTIONS[int(index)]), Faults(error, stall, stall_ms)
            )
        return self.settings

    def configure(self, new: dict[str, object]) -> dict[str, object]:
        """Apply a `/config` body (any subset of the settings); return the settings now in force."""
        old = self.current()
        distribution = str(new.get("distribution", old.delay.distribution))
        if distribution not in DISTRIBUTIONS:
            raise ValueError(f"distribution must be one of {', '.join(DISTRIBUTIONS)}")
        settings = Settings(
            Delay(_num(new, "delay_ms", old.delay.mean_ms), distribution),
            Faults(
                _num(new, "error_rate", old.faults.error_rate),
                _num(new, "stall_rate", old.faults.stall_rate),
                _num(new, "stall_ms", old.faults.stall_ms),
            ),
        )
        self.write_settings(settings)
        return {"delay_ms": settings.delay.mean_ms, **vars(settings.faults)}


def _num(table: dict[str, object], key: str, default: float) -> float:
    value = table.get(key, default)
    if not isinstance(value, int | float | str):
        raise ValueError(f"{key} must be a number")
    return float(value)


def draw(settings: Settings, rng: random.Random, asked_ms: float | None) -> tuple[float, bool]:
    """(milliseconds to wait, whether to answer 500) for one `/delay` request."""
    ms = asked_ms if asked_ms is not None else settings.delay.draw_ms(rng)
    faults = settings.faults
    if faults.stall_rate and rng.random() < faults.stall_rate:
        ms += faults.stall_ms
    return ms, bool(faults.error_rate and rng.random() < faults.error_rate)


async def watch_lag(state: SharedState, slot: int) -> None:
    """Every 10 ms, how late this process's event loop woke. A busy loop wakes late, and every
    request's timer with it: that lateness is the upstream adding to the delay it was asked for,
    which the lab must see before it trusts a latency (`apparatus_saturated`)."""
    while True:
        due = time.monotonic() + LAG_TICK_S
        await asyncio.sleep(LAG_TICK_S)
        state.lag(slot, max(0.0, time.monotonic() - due))
