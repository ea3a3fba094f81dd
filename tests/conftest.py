"""Real processes on loopback: the upstream and each server model, on free ports."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lab.backends.base import CpuLayout, LocalServer, NativeBackend
from lab.config.models import Registry, load_registry
from lab.config.scenario import UpstreamSpec
from lab.system import procs
from lab.system.resources import data_file

PITFALLS = data_file("servers", "pitfalls.toml")
TEST_WORKERS = 16


@pytest.fixture(scope="session")
def registry() -> Registry:
    return load_registry(PITFALLS)


@pytest.fixture(scope="session")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NativeBackend]:
    native = NativeBackend(tmp_path_factory.mktemp("run"), CpuLayout())
    yield native
    native.close()


@pytest.fixture(scope="session")
def upstream(backend: NativeBackend) -> Iterator[LocalServer]:
    server = backend.start_upstream(UpstreamSpec(delay_ms=50), procs.free_port())
    yield server
    server.stop()


@pytest.fixture()
def failing_upstream(backend: NativeBackend) -> Iterator[LocalServer]:
    server = backend.start_upstream(UpstreamSpec(delay_ms=1, error_rate=1.0), procs.free_port())
    yield server
    server.stop()


@pytest.fixture()
def start_model(backend: NativeBackend, upstream: LocalServer, registry: Registry):
    """Start a model by name with test-sized knobs; stopped at the end of the test."""
    started: list[LocalServer] = []

    def start(name: str, upstream_url: str | None = None) -> LocalServer:
        knobs = registry.knobs.updated({"concurrency": TEST_WORKERS}, "test").resolve(TEST_WORKERS)
        model = registry.models[name]
        server = backend.start_server(model, knobs, upstream_url or upstream.url, procs.free_port())
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


def lab_cli(*args: str) -> list[str]:
    """argv running the `lab` CLI in a subprocess with this interpreter."""
    return [sys.executable, "-c", "from lab.cli.main import entry; entry()", *args]


def lab_run(
    out: Path, *args: str, timeout_s: float = 240
) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """`lab run ARGS --out OUT` in a subprocess that must succeed; its run directory and result."""
    done = subprocess.run(
        lab_cli("run", *args, "--out", str(out)), capture_output=True, text=True, timeout=timeout_s
    )
    assert done.returncode == 0, done.stderr
    (run,) = [p for p in out.iterdir() if p.is_dir()]
    return run, done


def module_run(*args: str) -> Any:
    """A module-scoped `run_dir` fixture: one `lab run ARGS` whose run directory every test of the
    module reads (a sweep costs seconds; reading it costs nothing)."""

    @pytest.fixture(scope="module")
    def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
        run, _ = lab_run(tmp_path_factory.mktemp("results"), *args)
        return run

    return run_dir


def wait_answer(url: str, proc: subprocess.Popen[bytes], timeout_s: float = 30) -> None:
    """Until `url` answers, failing at once if the process that should serve it exits."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"{proc.args!r} exited with {proc.returncode}"
        try:
            with urllib.request.urlopen(url, timeout=1):
                return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"{url} did not answer within {timeout_s} s")


def undisturbed(step: dict) -> bool:
    """No flag but those other processes on a shared machine can raise: `host_busy`, and
    `apparatus_saturated` when they fill the load generator's core (it then waits for a CPU),
    `lab_limited`, which the verdict's rules raise where those kept the step below ideal, and
    the generator's own lag (a busy machine delays its loop too)."""
    shared = {"host_busy", "apparatus_saturated", "lab_limited", "generator_lag"}
    return set(step["flags"]) <= shared | {"generator_lag_extremes"}
