"""The connections a server's processes open to addresses that are not loopback.

Why: an app that calls an external API, a database or a cache does so from its settings; loaded
by the lab with its production settings, it would send the sweep's load to the real service. So
while the lab checks a user's app, the sockets of the server's process tree are read
(`lab.system.sockdiag`: the processes' socket inodes against the kernel's connected sockets) every
INTERVAL_S, and every connection whose far end is not loopback is kept, with the variables of the
server's environment that point at it: what to point elsewhere (the lab's mock upstream, its
PostgreSQL or Redis, or a loopback service of your own).

A connection shorter than INTERVAL_S can fall between two readings; one that waits for an answer
(a call the load would repeat) lasts longer, and one that cannot connect waits in SYN_SENT.
"""

from __future__ import annotations

import contextlib
import ipaddress
import threading
import urllib.parse
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import psutil

from lab.system import sockdiag

INTERVAL_S = 0.02
DEFAULT_PORTS = {
    **{"http": 80, "https": 443, "ws": 80, "wss": 443, "amqp": 5672, "mysql": 3306},
    **{"postgres": 5432, "postgresql": 5432, "redis": 6379, "rediss": 6379, "mongodb": 27017},
}
# A far end's scheme -> the lab service to point it at (lab.config.appenv's placeholders).
PLACEHOLDERS = {
    **{"postgres": "postgres", "postgresql": "postgres"},
    **{"redis": "redis", "rediss": "redis"},
}


@dataclass(frozen=True, order=True)
class Remote:
    """A connection's far end that is not loopback."""

    address: str
    port: int
    protocol: str  # tcp or udp

    @property
    def words(self) -> str:
        host = f"[{self.address}]" if ":" in self.address else self.address
        return f"{host}:{self.port} ({self.protocol})"


def is_loopback(address: str) -> bool:
    """127.0.0.0/8, ::1, and IPv4 loopback mapped into IPv6."""
    ip = ipaddress.ip_address(address.split("%")[0])
    mapped = getattr(ip, "ipv4_mapped", None)
    return ip.is_loopback or bool(mapped and mapped.is_loopback)


def remote_ends(pid: int) -> set[Remote]:
    """The non-loopback far ends of the inet sockets of `pid` and its descendants now."""
    return {
        Remote(c.remote[0], c.remote[1], c.protocol)
        for c in sockdiag.connections(pid)
        if not is_loopback(c.remote[0])
    }


def endpoint(value: str) -> tuple[str, int | None] | None:
    """The host and port a variable's value names (a URL or HOST:PORT), or None."""
    parts = urllib.parse.urlsplit(value if "://" in value else f"//{value}")
    try:
        host, port = parts.hostname, parts.port
    except ValueError:
        return None
    if not host:
        return None
    return host, port or DEFAULT_PORTS.get(parts.scheme.lower())


def pointing_at(remote: Remote, environ: Mapping[str, str]) -> list[str]:
    """The variables whose value names this far end: its address, or its port on a host name
    that is not loopback (a name may resolve to the address; the lab looks none up)."""
    found = []
    for name, value in sorted(environ.items()):
        named = endpoint(value)
        if named is None:
            continue
        host, port = named
        if host == remote.address or (port == remote.port and _named_remote(host)):
            found.append(name)
    return found


def _named_remote(host: str) -> bool:
    try:
        return not is_loopback(host)
    except ValueError:  # a name, not an address
        return host != "localhost"


def advice(remote: Remote, environ: Mapping[str, str]) -> str:
    """One line: the far end, and which variable to point elsewhere."""
    names = pointing_at(remote, environ)
    if not names:
        return (
            f"{remote.words}: no variable of the server's environment names it (the app's "
            "code or its settings files do): point it at a loopback service"
        )
    hints = ", ".join(f"--env {n}={_placeholder(environ[n])}" for n in names)
    values = ", ".join(f"{n}={environ[n]}" for n in names)
    return f"{remote.words}: from {values}: point it at the lab's or a loopback service ({hints})"


def _placeholder(value: str) -> str:
    """The lab's stand-in for what a value names: its PostgreSQL, its Redis, else its upstream."""
    scheme = urllib.parse.urlsplit(value).scheme.lower()
    return "{" + PLACEHOLDERS.get(scheme, "upstream") + "_url}"


def environment(pid: int) -> dict[str, str]:
    """The environment `pid` started with ({} where it cannot be read)."""
    try:
        return dict(psutil.Process(pid).environ())
    except psutil.Error:
        return {}


@contextlib.contextmanager
def watching(pid: int) -> Iterator[set[Remote]]:
    """Read `pid`'s tree's non-loopback connections every INTERVAL_S inside the block; the set
    yielded holds every far end seen, complete when the block ends."""
    seen: set[Remote] = set()
    stop = threading.Event()

    def sample() -> None:
        while True:
            seen.update(remote_ends(pid))
            if stop.wait(INTERVAL_S):
                return

    thread = threading.Thread(target=sample, name="outbound", daemon=True)
    thread.start()
    try:
        yield seen
    finally:
        stop.set()
        thread.join()
        seen.update(remote_ends(pid))


def held(pid: int, ports: Mapping[int, str]) -> dict[str, int]:
    """The TCP connections `pid`'s tree holds now to each of `ports` on loopback (port -> the
    service there), counted by service: the pools of an app's processes."""
    counts = dict.fromkeys(ports.values(), 0)
    for c in sockdiag.connections(pid):
        address, port = c.remote
        if c.protocol == "tcp" and port in ports and is_loopback(address):
            counts[ports[port]] += 1
    return counts


@contextlib.contextmanager
def holding(
    pid: int, ports: Mapping[int, str], interval_s: float = 0.25
) -> Iterator[dict[str, int]]:
    """The most connections `pid`'s tree held to each service at once inside the block
    (read every `interval_s`): a pool's size is the most it ever held."""
    most: dict[str, int] = dict.fromkeys(ports.values(), 0)
    stop = threading.Event()

    def sample() -> None:
        while True:
            for service, count in held(pid, ports).items():
                most[service] = max(most[service], count)
            if stop.wait(interval_s):
                return

    thread = threading.Thread(target=sample, name="held", daemon=True)
    if ports:
        thread.start()
    try:
        yield most
    finally:
        stop.set()
        if thread.is_alive():
            thread.join()
