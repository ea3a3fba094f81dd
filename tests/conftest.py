"""Real processes on loopback: the upstream and each server model, on free ports."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from lab.backends.base import CpuLayout, LocalServer, NativeBackend
from lab.config.models import Registry, load_registry
from lab.config.scenario import UpstreamSpec
from lab.system import procs
from lab.system.resources import data_file
from tests.tiers import guard_runtest, install_guard, mark_process_tests, report_spawned

PITFALLS = data_file("servers", "pitfalls.toml")
TEST_WORKERS = 16


def pytest_configure(config: pytest.Config) -> None:
    install_guard()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    mark_process_tests(items)


# An in-process test (one not marked `procs`) that starts a process fails, naming the command.
pytest_runtest_setup = pytest_runtest_call = pytest_runtest_teardown = guard_runtest
pytest_runtest_makereport = report_spawned


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
