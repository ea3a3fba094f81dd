"""The recommended kernel and limit settings in tuning/: one parser for doctor and Docker.

`tuning/sysctl.conf` (sysctl.conf(5)) and `tuning/limits.conf` (limits.conf(5)) are the single
source of the values `lab doctor` compares the host with and the Docker backend and compose.yaml
apply to containers.
"""

from __future__ import annotations

from pathlib import Path

from lab.record.errors import LabError
from lab.system.resources import TUNING

SYSCTL_FILE = TUNING / "sysctl.conf"
LIMITS_FILE = TUNING / "limits.conf"


def read_sysctls(path: Path = SYSCTL_FILE) -> dict[str, str]:
    """`key = value` lines of a sysctl.conf file; comments (# or ;) and blank lines skipped."""
    values = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        key, sep, value = line.partition("=")
        if sep and not key.startswith(";"):
            values[key.strip()] = " ".join(value.split())
    return values


def read_nofile(path: Path = LIMITS_FILE) -> dict[str, int]:
    """The soft and hard `nofile` values for every user (`*`) of a limits.conf file."""
    found = {}
    for line in path.read_text().splitlines():
        parts = line.split("#", 1)[0].split()
        if (
            len(parts) == 4
            and parts[0] == "*"
            and parts[1:3] in (["soft", "nofile"], ["hard", "nofile"])
        ):
            found[parts[1]] = int(parts[3])
    if set(found) != {"soft", "hard"}:
        raise LabError(f"{path}: needs a soft and a hard `* nofile` line")
    return found
