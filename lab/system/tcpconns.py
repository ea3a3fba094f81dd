"""The TCP connections to one port, read from the kernel's socket tables (`/proc/net/tcp{,6}`).

Why: a server that closes every connection after its response (uWSGI's HTTP router, a server
without keep-alive) makes each request pay a TCP connect, accept and close, in the load
generators and in the kernel's softirq. That cost lands on the apparatus, so the lab counts the
connections a step opened and the sockets left in TIME_WAIT (the side that closed first keeps one
for 60 s) to say what the generators' CPU went to, instead of asking for more generators.

A connection is one 4-tuple (either end on the port, listening sockets left out; both ends of a
loopback connection are the same one), whatever its state: one seen at the window's end that was
not there at its start was opened in the window. A 4-tuple reused within the window counts once,
so the count is a lower bound at very high rates.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path

TABLES = (Path("/proc/net/tcp"), Path("/proc/net/tcp6"))
LISTEN = "0A"
TIME_WAIT = "06"


@dataclass(frozen=True)
class Sockets:
    """The connections with `port` at either end, as (port's end, other end), and the sockets
    in TIME_WAIT among them."""

    tuples: frozenset[tuple[str, str]]
    time_wait: int
    readable: bool = True  # False: no socket table could be read (another namespace, no /proc)


def sockets(port: int, tables: tuple[Path, ...] = TABLES) -> Sockets:
    """One reading of the kernel's tables for `port` (cheap: two files, parsed once)."""
    suffix = f":{port:04X}"
    found: set[tuple[str, str]] = set()
    waiting, readable = 0, False
    for table in tables:
        with contextlib.suppress(OSError):
            lines = table.read_text().splitlines()[1:]
            readable = True
            for line in lines:
                fields = line.split()
                if len(fields) < 4 or fields[3] == LISTEN:
                    continue
                local, remote = fields[1], fields[2]
                if local.endswith(suffix):  # the server's end
                    found.add((local, remote))
                elif remote.endswith(suffix):  # the client's end: the same connection
                    found.add((remote, local))
                else:
                    continue
                waiting += fields[3] == TIME_WAIT
    return Sockets(frozenset(found), waiting, readable)


def opened(before: Sockets, after: Sockets) -> int:
    """Connections opened between two readings (-1: unknown, nothing readable or nothing seen
    on the port at all, as when the server listens in another network namespace)."""
    if not (before.readable and after.readable) or not (before.tuples or after.tuples):
        return -1
    return len(after.tuples - before.tuples)
