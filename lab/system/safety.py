"""Where the lab may send load: loopback and its own containers, unless the user says otherwise.

A load generator pointed at the wrong host is a denial-of-service attack. Every URL the lab is
about to load, and every address a listener it starts binds to, passes `check_host` first; only
`--allow-remote` lifts the restriction, and then it is printed on every run.
"""

from __future__ import annotations

import ipaddress
import socket
import urllib.parse
from collections.abc import Iterable

from lab.record.errors import LabError

REMOTE_WARNING = (
    "--allow-remote: load may be sent to, and listeners may bind on, non-loopback addresses. "
    "Only point the lab at hosts you own."
)


def addresses(host: str) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    """Every address a host name resolves to (a literal address resolves to itself)."""
    try:
        return [ipaddress.ip_address(host.strip("[]"))]
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError) as e:
        raise LabError(f"cannot resolve host {host!r}: {e}") from None
    return [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos]


def is_loopback(host: str) -> bool:
    """True when every address the host resolves to is a loopback address (127.0.0.0/8, ::1)."""
    found = addresses(host)
    return bool(found) and all(a.is_loopback for a in found)


def check_host(host: str, what: str, *, allow_remote: bool, trusted: Iterable[str] = ()) -> None:
    """Refuse a non-loopback host unless it is one of the lab's own (`trusted`) or allowed."""
    if allow_remote or host in set(trusted) or is_loopback(host):
        return
    raise LabError(
        f"{what} {host!r} is not a loopback address; the lab only loads 127.0.0.0/8, ::1 and its "
        f"own containers. If you own that host and mean it, add --allow-remote."
    )


def check_url(url: str, what: str, *, allow_remote: bool, trusted: Iterable[str] = ()) -> None:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise LabError(f"{what} {url!r} is not an http(s) URL with a host")
    check_host(parts.hostname, what, allow_remote=allow_remote, trusted=trusted)
