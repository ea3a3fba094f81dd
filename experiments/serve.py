"""Start a server child for an experiment and always take it down again (lab.system.procs).

Each server runs in its own process group (so a uWSGI master and its workers die together), with
its output in the run directory's `logs/`, and is only used once an HTTP URL answers; waiting is
bounded so a server that never comes up fails the experiment instead of hanging it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from lab.system.procs import Proc, free_port, start, wait_http
from lab.system.resources import child_env

__all__ = ["free_port", "serving"]


@contextmanager
def serving(
    argv: Sequence[str],
    ready_url: str,
    log: Path,
    cpus: Sequence[int] | None = None,
    env: dict[str, str] | None = None,
    timeout_s: float = 20.0,
) -> Iterator[Proc]:
    """Run `argv` until the block ends; `cpus` pins it (and its children) with taskset."""
    proc = start(
        log.stem,
        list(argv),
        log_path=log,
        env={**child_env(), **(env or {})},
        cpus=tuple(cpus or ()),
    )
    try:
        wait_http(proc, ready_url, timeout_s)
        yield proc
    finally:
        proc.stop()
