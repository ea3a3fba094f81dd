"""Where servers run. The native backend starts them as local processes pinned to cores.

The sweep only talks to the `Backend` and `Server` protocols, so the Docker backend (each model in
its own container) plugs into the same run sequence and writes the same results.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from lab.config.models import Knobs, Model, server_env
from lab.config.scenario import UpstreamSpec
from lab.system import procs
from lab.system.resources import CODE_ROOT, child_env
from lab.system.sampling import Meter, TreeMeter

HOST = "127.0.0.1"
READY_TIMEOUT_S = 30.0


def upstream_argv(
    port: int, *flags: str, host: str = HOST, python: str = sys.executable
) -> list[str]:
    """The mock upstream's command line: the backends, experiments, benchmarks and tests all
    start `servers.upstream` this one way (a container with its own `python`)."""
    return [python, "-m", "servers.upstream", "--host", host, "--port", str(port), *flags]


class Server(Protocol):
    name: str
    url: str
    argv: list[str]

    def alive(self) -> bool: ...
    def meter(self) -> Meter | None: ...
    def evidence(self) -> dict[str, Any]: ...
    def stop(self) -> None: ...


class Backend(Protocol):
    name: str

    def start_upstream(self, spec: UpstreamSpec, port: int) -> Server: ...
    def start_server(self, model: Model, knobs: Knobs, upstream_url: str, port: int) -> Server: ...
    def loadgen_cpus(self) -> tuple[int, ...]: ...
    def describe(self) -> dict[str, Any]: ...
    def close(self) -> None: ...


@dataclass(frozen=True)
class CpuLayout:
    """Which cores the server gets, and which the load generator and upstream share."""

    server: tuple[int, ...] = ()
    client: tuple[int, ...] = ()

    @classmethod
    def split(cls, pin: bool) -> CpuLayout:
        cpus = sorted(os.sched_getaffinity(0))
        if not pin or len(cpus) < 2:
            return cls()
        half = len(cpus) // 2
        return cls(server=tuple(cpus[half:]), client=tuple(cpus[:half]))


@dataclass
class LocalServer:
    name: str
    url: str
    proc: procs.Proc
    argv: list[str] = field(default_factory=list)

    def alive(self) -> bool:
        return self.proc.alive()

    def meter(self) -> Meter | None:
        try:
            return TreeMeter(self.proc.pid)
        except Exception:  # the process is already gone: nothing to measure
            return None

    def evidence(self) -> dict[str, Any]:
        return self.proc.evidence()

    def stop(self) -> None:
        self.proc.stop()


class NativeBackend:
    name = "native"
    ready_path = "/health"  # what a started server must answer under 500 (a user's app: its route)

    def __init__(
        self,
        run_dir: Path,
        layout: CpuLayout,
        host: str = HOST,
        ready_timeout_s: float = READY_TIMEOUT_S,
        interpreters: dict[str, dict[str, Any]] | None = None,
    ) -> None:
        """`host`: where every listener binds (loopback unless the run allows remote).

        `interpreters`: per model, the Python it runs under (version, GIL), for the manifest.
        """
        self.interpreters = interpreters or {}
        self.run_dir = run_dir
        self.layout = layout
        self.host = host.strip("[]")  # bare address; URLs and binds add IPv6 brackets
        self.ready_timeout_s = ready_timeout_s
        self.started: list[procs.Proc] = []

    def _start(
        self,
        name: str,
        argv: list[str],
        env: dict[str, str],
        port: int,
        cpus: tuple[int, ...],
        ready_path: str,
        cwd: Path = CODE_ROOT,
    ) -> LocalServer:
        procs.ensure_port_free(self.host, port, name)
        proc = procs.start(
            name,
            argv,
            log_path=self.run_dir / "logs" / f"{name}.log",
            env=env,
            cwd=cwd,
            cpus=cpus,
            pid_dir=self.run_dir / "pids",
        )
        self.started.append(proc)
        url = procs.url(self.host, port)
        try:
            procs.wait_http(proc, url + ready_path, self.ready_timeout_s)
        except procs.StartFailed:
            proc.stop()
            raise
        return LocalServer(name, url, proc, proc.argv)

    def start_upstream(self, spec: UpstreamSpec, port: int) -> LocalServer:
        argv = upstream_argv(port, *spec.argv_flags(), host=self.host)
        return self._start("upstream", argv, child_env(), port, self.layout.client, "/health")

    def start_server(self, model: Model, knobs: Knobs, upstream_url: str, port: int) -> LocalServer:
        argv = model.command(knobs, self.host, port)
        env = server_env(model, knobs, upstream_url)
        cwd = Path(model.cwd) if model.cwd else CODE_ROOT  # a user's app: its own directory
        cpus = self.layout.server
        return self._start(model.name, argv, env, port, cpus, self.ready_path, cwd)

    def loadgen_cpus(self) -> tuple[int, ...]:
        return self.layout.client

    def describe(self) -> dict[str, Any]:
        layout = {
            "server": list(self.layout.server),
            "client_and_upstream": list(self.layout.client),
        }
        return {"backend": self.name, "cpu_layout": layout, "interpreters": self.interpreters}

    def close(self) -> None:
        for proc in self.started:
            proc.stop()
