"""The connected sockets of a process tree, read from the kernel with sock_diag (netlink).

Why: psutil's `Process.net_connections` parses the whole of `/proc/net/{tcp,tcp6,udp,udp6}` in
Python on every call, TIME_WAIT sockets included. After a few load steps a machine holds tens of
thousands of them (each closed connection stays 60 s): one reading then cost 16 ms at 14,600 and
about 60 ms at 58,000 on the 2-core machine, in the lab's own process, beside 32 probe threads. A
pool sampled every 5 ms through a 150 ms probe got two or three readings, missed its peak, and the
check named no cap (tests/test_apppool.py, in CI after the process tier). The kernel's sock_diag
interface filters by state before anything reaches Python (TIME_WAIT, listening and closed
sockets never leave it) and answers in 1-3 ms at the same counts, with the lab's GIL released.

How: the tree's socket inodes come from `/proc/PID/fd` (a link `socket:[INODE]` per socket), the
connected inet sockets of the network namespace from one sock_diag dump per family and protocol,
and the two are matched by inode. Where netlink is refused (a sandbox without it), psutil reads
the same sockets the slow way.
"""

from __future__ import annotations

import contextlib
import os
import socket
import struct
from collections.abc import Iterator
from dataclasses import dataclass

import psutil

SOCK_DIAG = 4  # NETLINK_SOCK_DIAG
BY_FAMILY = 20  # SOCK_DIAG_BY_FAMILY
REQUEST_DUMP = 0x1 | 0x300  # NLM_F_REQUEST | NLM_F_DUMP
DONE, ERROR = 3, 2  # NLMSG_DONE, NLMSG_ERROR
HEADER = struct.Struct("=IHHII")  # nlmsghdr: length, type, flags, seq, pid
REQUEST = struct.Struct("=BBBBI48x")  # inet_diag_req_v2: family, protocol, ext, pad, states, id
ENDS = struct.Struct("!HH16s16s")  # inet_diag_msg's id: sport, dport, src, dst (network order)
INODE_AT = 68  # inet_diag_msg: idiag_inode's offset
TIME_WAIT, CLOSE, LISTEN = 6, 7, 10  # the kernel's TCP states (include/net/tcp_states.h)
CONNECTED = 0xFFF & ~(1 << TIME_WAIT | 1 << CLOSE | 1 << LISTEN)  # the states asked for
UDP_ANY = 0xFFF  # a UDP socket's state is ESTABLISHED once connected, CLOSE otherwise
FAMILIES = (socket.AF_INET, socket.AF_INET6)
PROTOCOLS = {socket.IPPROTO_TCP: ("tcp", CONNECTED), socket.IPPROTO_UDP: ("udp", UDP_ANY)}


@dataclass(frozen=True)
class Connection:
    """One socket of the tree with a far end."""

    protocol: str  # tcp or udp
    local: tuple[str, int]
    remote: tuple[str, int]


def connections(pid: int) -> list[Connection]:
    """The sockets of `pid` and its descendants that have a far end now (not listening, not in
    TIME_WAIT, not an unconnected UDP socket). [] where the process is gone."""
    inodes = socket_inodes(pid)
    if not inodes:
        return []
    try:
        found = [c for inode, c in _dumped() if inode in inodes]
    except OSError:  # no netlink here: psutil reads the tables
        return _psutil_connections(pid)
    return found


def socket_inodes(pid: int) -> set[int]:
    """The inodes of the sockets the tree's processes hold open."""
    inodes: set[int] = set()
    for proc in _tree(pid):
        fds = f"/proc/{proc.pid}/fd"
        with contextlib.suppress(OSError):
            for fd in os.listdir(fds):
                with contextlib.suppress(OSError):
                    link = os.readlink(f"{fds}/{fd}")
                    if link.startswith("socket:["):
                        inodes.add(int(link[8:-1]))
    return inodes


def _tree(pid: int) -> list[psutil.Process]:
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


def _dumped() -> Iterator[tuple[int, Connection]]:
    """(inode, connection) for every connected inet socket of this network namespace."""
    for family in FAMILIES:
        for protocol, (name, states) in PROTOCOLS.items():
            for message in _dump(family, protocol, states):
                sport, dport, src, dst = ENDS.unpack_from(message, 4)
                if not dport:
                    continue  # no far end: an unconnected UDP socket
                size = 4 if family == socket.AF_INET else 16
                local = (socket.inet_ntop(family, src[:size]), sport)
                remote = (socket.inet_ntop(family, dst[:size]), dport)
                (inode,) = struct.unpack_from("=I", message, INODE_AT)
                yield inode, Connection(name, local, remote)


def _dump(family: int, protocol: int, states: int) -> Iterator[bytes]:
    """The inet_diag_msg bodies of one sock_diag dump (a socket each)."""
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, SOCK_DIAG) as nl:
        body = REQUEST.pack(family, protocol, 0, 0, states)
        nl.sendall(HEADER.pack(HEADER.size + len(body), BY_FAMILY, REQUEST_DUMP, 1, 0) + body)
        while True:
            data, at = nl.recv(1 << 16), 0
            while at < len(data):
                length, kind, _flags, _seq, _pid = HEADER.unpack_from(data, at)
                if kind == DONE:
                    return
                if kind == ERROR or length < HEADER.size:
                    raise OSError(f"sock_diag refused the dump (message type {kind})")
                yield data[at + HEADER.size : at + length]
                at += (length + 3) & ~3


def _psutil_connections(pid: int) -> list[Connection]:
    found = []
    for proc in _tree(pid):
        with contextlib.suppress(psutil.Error):
            for conn in proc.net_connections(kind="inet"):
                if conn.raddr:
                    protocol = "udp" if conn.type == socket.SOCK_DGRAM else "tcp"
                    local, remote = (
                        (conn.laddr.ip, conn.laddr.port),
                        (conn.raddr.ip, conn.raddr.port),
                    )
                    found.append(Connection(protocol, local, remote))
    return found
