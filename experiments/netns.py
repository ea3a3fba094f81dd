"""A private network namespace for one measured case: its own loopback, TCP settings and counters.

Why: whether 1,000 simultaneous connects meet a listen queue that drops them, and how long the
client then backs off, is decided by per-namespace kernel settings (`net.core.somaxconn`,
`tcp_syncookies`, `tcp_max_syn_backlog`, `tcp_syn_linear_timeouts`). A case that runs in its own
namespace can use another machine's values (the blog's Docker defaults) without changing this
host, and the kernel's TCP counters it reads (what `nstat` prints) count only its own
connections, not those of everything else on the machine.

Call `enter` first thing in a single-threaded child process: it unshares the calling thread, and
every process started from it afterwards inherits the namespace. The namespace disappears with its
last process, so nothing is left behind.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import socket
import struct
from collections.abc import Mapping
from pathlib import Path

from lab.system.environment import read_sysctl

CLONE_NEWNET = 0x40000000
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
IFREQ = "16sH22x"  # struct ifreq: interface name, then the flags (40 bytes in all)

# The settings that decide what a connect burst against a small listen queue costs.
SETTINGS = (
    "net.core.somaxconn",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.tcp_max_syn_backlog",
    "net.ipv4.tcp_syn_linear_timeouts",  # Linux 6.5+: the first N SYN retries wait 1 s each
)

# nstat's names (table prefix + field) of the counters that show a listen queue's drops and the
# SYN retransmissions they cost.
COUNTERS = (
    "TcpExtListenOverflows",
    "TcpExtListenDrops",
    "TcpExtTCPReqQFullDrop",
    "TcpExtTCPReqQFullDoCookies",
    "TcpExtSyncookiesSent",
    "TcpExtSyncookiesRecv",
    "TcpExtSyncookiesFailed",
    "TcpExtTCPSynRetrans",
    "TcpExtTCPTimeouts",
    "TcpRetransSegs",
    "TcpActiveOpens",
    "TcpPassiveOpens",
    "TcpAttemptFails",
)


class Unavailable(Exception):
    """No private network namespace here; the message is one line that says why."""


def unshare_net() -> None:
    """Move the calling thread into a new network namespace (CAP_SYS_ADMIN needed)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWNET) != 0:
        reason = os.strerror(ctypes.get_errno())
        raise Unavailable(f"unshare(CLONE_NEWNET) failed: {reason} (needs root or CAP_SYS_ADMIN)")


def loopback_up() -> None:
    """A new namespace's loopback is down: bring it up, as `ip link set lo up` would."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        ifr = fcntl.ioctl(s, SIOCGIFFLAGS, struct.pack(IFREQ, b"lo", 0))
        flags = struct.unpack(IFREQ, ifr)[1]
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack(IFREQ, b"lo", flags | IFF_UP))


def write_sysctl(name: str, value: str) -> bool:
    """Set a sysctl of the current namespace; False where this kernel does not have it."""
    try:
        Path("/proc/sys", *name.split(".")).write_text(value)
    except FileNotFoundError:
        return False
    return True


def wanted(overrides: Mapping[str, str]) -> dict[str, str]:
    """This host's SETTINGS with `overrides` on top: what a case's namespace is given. A setting
    this kernel lacks is left out (tcp_syn_linear_timeouts before Linux 6.5, whose SYN retries
    were always exponential)."""
    unknown = set(overrides) - set(SETTINGS)
    if unknown:
        raise ValueError(f"not a namespace setting this lab knows: {sorted(unknown)}")
    host = {name: read_sysctl(name) for name in SETTINGS}
    return {name: overrides.get(name, v) for name, v in host.items() if v is not None}


def enter(overrides: Mapping[str, str]) -> dict[str, str | None]:
    """Enter a private namespace with this host's SETTINGS, then `overrides`; return them as set
    (a setting this kernel lacks reads back as None).

    The host's values are copied first, so a case with no overrides behaves as this machine does.
    """
    values = wanted(overrides)
    unshare_net()
    loopback_up()
    for name, value in values.items():
        write_sysctl(name, value)
    return {name: read_sysctl(name) for name in SETTINGS}


def counters() -> dict[str, int]:
    """COUNTERS of the current namespace, from /proc/net/netstat and /proc/net/snmp as nstat
    reads them."""
    return parse_counters("".join(Path("/proc/net", t).read_text() for t in ("netstat", "snmp")))


def parse_counters(text: str) -> dict[str, int]:
    """COUNTERS in the text of /proc/net/netstat and /proc/net/snmp (each table a header line of
    names followed by a line of values), read here or inside a container (`docker exec cat`)."""
    found: dict[str, int] = {}
    lines = text.splitlines()
    for head, values in zip(lines[::2], lines[1::2], strict=False):
        prefix, *names = head.split()
        for name, value in zip(names, values.split()[1:], strict=False):
            key = prefix.rstrip(":") + name
            if key in COUNTERS:
                found[key] = int(value)
    return found


def delta(before: Mapping[str, int], after: Mapping[str, int]) -> dict[str, int]:
    """after - before per counter, under nstat's names without the table prefix."""
    return {
        key.removeprefix("TcpExt").removeprefix("Tcp"): after.get(key, 0) - before.get(key, 0)
        for key in COUNTERS
    }
