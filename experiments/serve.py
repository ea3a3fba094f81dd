"""Start a server child for an experiment and always take it down again.

Each server runs in its own process group (so a uWSGI master and its workers die together), with
its output in the run directory's `logs/`, and is only used once an HTTP URL answers; waiting is
bounded so a server that never comes up fails the experiment instead of hanging it.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from experiments.common import child_env, kill_group


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, timeout_s: float, proc: subprocess.Popen[bytes] | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode} before {url} answered")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.1)
    raise TimeoutError(f"{url} did not answer within {timeout_s} s")


@contextmanager
def serving(
    argv: Sequence[str],
    ready_url: str,
    log: Path,
    cpus: Sequence[int] | None = None,
    env: dict[str, str] | None = None,
    timeout_s: float = 20.0,
) -> Iterator[subprocess.Popen[bytes]]:
    """Run `argv` until the block ends; `cpus` pins it (and its children) with sched_setaffinity."""
    log.parent.mkdir(parents=True, exist_ok=True)
    preexec = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            list(argv),
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**child_env(), **(env or {})},
            start_new_session=True,
            preexec_fn=preexec,
        )
    try:
        wait_http(ready_url, timeout_s, proc)
        yield proc
    finally:
        kill_group(proc)
