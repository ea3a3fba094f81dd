"""The TCP connections to one port closed during a window, from the kernel's socket tables.

Why: a server that closes every connection after its response (uWSGI's HTTP router, a server
without keep-alive) makes each request pay a TCP connect, accept and close, in the load
generators and in the kernel's softirq. That cost lands on the apparatus, so the lab counts the
connections a step closed to say what the generators' CPU went to, instead of asking for more
generators.

How: the end that closes first keeps its socket in TIME_WAIT for 60 s (Linux's fixed
TCP_TIMEWAIT_LEN), and `/proc/net/tcp{,6}` shows how long each one has left, so each TIME_WAIT
socket on the port tells when its connection closed. Read once a second, every connection closed
in the window is seen (a 4-tuple is reused only after the client cycles through its ephemeral
ports, seconds later at any rate a generator reaches) and counted once, by its 4-tuple and close
time. A connection reset instead of closed leaves no TIME_WAIT: the count is a lower bound.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

from lab.system.sampling import Reading

TABLES = (Path("/proc/net/tcp"), Path("/proc/net/tcp6"))
TIME_WAIT = "06"
TIME_WAIT_S = 60.0  # TCP_TIMEWAIT_LEN
TICKS_PER_S = 100  # /proc/net/tcp shows timers in clock ticks (USER_HZ)
SAME_CLOSE_S = 0.5  # one 4-tuple seen closing within this of its last close: the same one


def time_wait(port: int, tables: tuple[Path, ...] = TABLES) -> list[tuple[str, float]] | None:
    """The TIME_WAIT sockets with `port` at either end: (the connection, seconds left), both ends
    of a loopback connection read as one. None: no socket table could be read."""
    suffix = f":{port:04X}"
    found: list[tuple[str, float]] = []
    readable = False
    for table in tables:
        with contextlib.suppress(OSError):
            lines = table.read_text().splitlines()[1:]
            readable = True
            for line in lines:
                fields = line.split()
                if len(fields) < 5 or fields[3] != TIME_WAIT:
                    continue
                local, remote = fields[1], fields[2]
                if local.endswith(suffix):  # the server's end
                    key = f"{local}-{remote}"
                elif remote.endswith(suffix):  # the client's end: the same connection
                    key = f"{remote}-{local}"
                else:
                    continue
                left = int(fields[5].partition(":")[2] or "0", 16) / TICKS_PER_S
                found.append((key, left))
    return found if readable else None


class ConnectionMeter:
    """Connections to `port` closed since `clear()`, sampled like the CPU meters (a `Meter`)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.since = time.monotonic()
        self.closes: dict[str, float] = {}  # connection -> when it last closed (monotonic s)
        self.closed = 0
        self.close_times: list[float] = []  # when each counted connection closed (monotonic s)
        self.time_wait = -1  # TIME_WAIT sockets on the port at the last sample (-1: unknown)

    def clear(self) -> None:
        self.since = time.monotonic()
        self.closes.clear()
        self.closed = 0
        self.close_times.clear()

    def sample(self) -> Reading:
        now = time.monotonic()
        found = time_wait(self.port)
        if found is None:
            return Reading(0.0)
        for key, left in found:
            closed_at = now - (TIME_WAIT_S - left)
            last = self.closes.get(key)
            if closed_at >= self.since and (last is None or closed_at - last > SAME_CLOSE_S):
                self.closed += 1
                self.close_times.append(closed_at)
            self.closes[key] = closed_at
        self.time_wait = len(found)
        return Reading(0.0)

    def counted(self, window_s: float | None = None) -> tuple[int, int]:
        """(connections closed in the window, TIME_WAIT sockets now); -1 each where unknown.
        `window_s`: the measured window's length from `clear()`. Closes after it are not
        counted: at the step's end every user closes its own connection, which a keep-alive
        server would otherwise be charged with (400 users, 750 requests: 0.53 per request)."""
        self.sample()
        if self.time_wait < 0:
            return -1, -1
        if window_s is None:
            return self.closed, self.time_wait
        end = self.since + window_s
        return sum(1 for t in self.close_times if t <= end), self.time_wait
