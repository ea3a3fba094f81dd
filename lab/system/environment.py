"""What the machine was: recorded in every manifest, because results depend on all of it."""

from __future__ import annotations

import os
import platform
import resource
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import lab
from lab.system.resources import CODE_ROOT

PACKAGES = (
    "flask",
    "quart",
    "werkzeug",
    "urllib3",
    "aiohttp",
    "gevent",
    "greenlet",
    "uwsgi",
    "gunicorn",
    "uvicorn",
    "uvicorn-worker",
    "uvloop",
    "httptools",
    "locust",
    "geventhttpclient",
    "hdrhistogram",
    "psutil",
)
SYSCTLS = (
    "net.core.somaxconn",
    "net.ipv4.tcp_max_syn_backlog",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.tcp_tw_reuse",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_syncookies",
    "fs.file-max",
    "fs.nr_open",
)


def read_sysctl(name: str) -> str | None:
    try:
        return Path("/proc/sys", *name.split(".")).read_text().split("\n")[0].replace("\t", " ")
    except OSError:
        return None


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def git_sha() -> str:
    try:
        out = subprocess.run(
            ["git", "-C", str(CODE_ROOT), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        )
        dirty = subprocess.run(
            ["git", "-C", str(CODE_ROOT), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=5,
        ).stdout.strip()
        return out.stdout.strip() + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def package_versions() -> dict[str, str]:
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def capture() -> dict[str, Any]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return {
        "lab_version": lab.__version__,
        "git_sha": git_sha(),
        "python": sys.version.split()[0],
        "python_implementation": platform.python_implementation(),
        "packages": package_versions(),
        "kernel": platform.release(),
        "os": platform.platform(),
        "cpu_model": cpu_model(),
        "cpus": os.cpu_count(),
        "cpus_usable": sorted(os.sched_getaffinity(0)),
        "memory_gb": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "sysctls": {name: read_sysctl(name) for name in SYSCTLS},
        "limits": {"nofile_soft": soft, "nofile_hard": hard},
    }
