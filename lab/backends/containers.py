"""`lab run --backend docker`: the same sweep, with the upstream and each model in a container.

Why: containers give each model its own CPU and memory limits, so a comparison is isolated from
whatever else runs on the machine and reproducible elsewhere. The sweep itself (load generator,
preflight, steps) stays on the host and is unchanged: it reaches the containers through ports
published on 127.0.0.1 only, and reads CPU and memory through the Docker SDK's container stats
instead of the process tree.

Every container and the run's network carry the label `concurrency-lab.run=<run id>`; `close()`
removes everything with that label (the sweep calls it on success, failure and Ctrl-C), so a run
never touches anything it did not start; if the lab dies before (SIGKILL), its watcher
(lab.system.tether) runs `python -m lab.backends.containers RUN_ID`, which does the same. A
missing Docker Engine or image is this machine's state (Refused: exit 3). The containers get the
same limits and hardening as compose.yaml, with sysctls and open-file limits read from tuning/.
"""

from __future__ import annotations

import contextlib
import sys
import time
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from lab.backends.base import CpuLayout, upstream_argv
from lab.config.models import Knobs, Model
from lab.config.scenario import UpstreamSpec
from lab.record.errors import LabError, Refused
from lab.system import tether
from lab.system.procs import StartFailed, wait_http
from lab.system.sampling import MB, Reading
from lab.system.tuning import read_nofile, read_sysctls

RUN_LABEL = "concurrency-lab.run"
DEFAULT_IMAGE = "concurrency-lab:latest"
CONTAINER_PORT = 8000
READY_TIMEOUT_S = 60.0
LOG_TAIL_LINES = 20


@dataclass(frozen=True)
class ContainerLimits:
    """Per-container limits, the same defaults as compose.yaml's x-limits anchor."""

    cpus: float = 1.0
    mem_limit: str = "1g"
    pids_limit: int = 4096
    sysctls: dict[str, str] = field(default_factory=read_sysctls)
    nofile: dict[str, int] = field(default_factory=read_nofile)

    def run_kwargs(self, cpuset: tuple[int, ...]) -> dict[str, Any]:
        """Limits and hardening as docker SDK `containers.run` arguments."""
        import docker.types

        kwargs: dict[str, Any] = {
            "nano_cpus": int(self.cpus * 1e9),
            "mem_limit": self.mem_limit,
            "pids_limit": self.pids_limit,
            "sysctls": self.sysctls,
            "ulimits": [docker.types.Ulimit(name="nofile", **self.nofile)],
            "user": "10001:10001",
            "read_only": True,
            "tmpfs": {"/tmp": "size=64m,mode=1777"},
            "cap_drop": ["ALL"],
            "security_opt": ["no-new-privileges:true"],
            "init": True,
        }
        if cpuset:
            kwargs["cpuset_cpus"] = ",".join(map(str, cpuset))
        return kwargs


class ContainerMeter:
    """CPU% (100 = one core) and memory of a container, from one-shot Docker stats.

    CPU is the cgroup's usage delta between samples over the wall time between them, like the
    native TreeMeter. Memory is what `docker stats` shows: usage less inactive file cache.
    """

    def __init__(self, container: Any) -> None:
        self.container = container
        self.last_cpu_ns, _ = self._read()
        self.last_wall = time.monotonic()

    def _read(self) -> tuple[int, float]:
        stats = self.container.stats(stream=False, one_shot=True)
        cpu_ns = int(stats.get("cpu_stats", {}).get("cpu_usage", {}).get("total_usage", 0))
        memory = stats.get("memory_stats", {})
        detail = memory.get("stats", {})
        cache = detail.get("total_inactive_file", detail.get("inactive_file", 0))
        return cpu_ns, max(memory.get("usage", 0) - cache, 0) / MB

    def sample(self) -> Reading:
        """The cgroup counts each page once, as PSS summed does: it stands for both figures."""
        cpu_ns, mem_mb = self._read()
        now = time.monotonic()
        wall, self.last_wall = now - self.last_wall, now
        delta, self.last_cpu_ns = cpu_ns - self.last_cpu_ns, cpu_ns
        return Reading(
            round(100 * delta / 1e9 / max(wall, 1e-9), 1), round(mem_mb, 1), round(mem_mb, 1)
        )


@dataclass
class ContainerServer:
    """A started container, as the sweep's `Server` protocol sees it."""

    name: str
    url: str
    argv: list[str]
    container: Any

    def alive(self) -> bool:
        with contextlib.suppress(Exception):
            self.container.reload()
            return bool(self.container.status == "running")
        return False

    def meter(self) -> ContainerMeter | None:
        try:
            return ContainerMeter(self.container)
        except Exception:  # the container is already gone: nothing to measure
            return None

    def evidence(self) -> dict[str, Any]:
        evidence: dict[str, Any] = {"container": self.container.name}
        with contextlib.suppress(Exception):
            self.container.reload()
            state = self.container.attrs["State"]
            evidence.update(
                status=state["Status"], exit_code=state["ExitCode"], oom_killed=state["OOMKilled"]
            )
            logs = self.container.logs(tail=LOG_TAIL_LINES).decode(errors="replace")
            evidence["log_tail"] = logs.splitlines()
        return evidence

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self.container.stop(timeout=5)
        with contextlib.suppress(Exception):
            self.container.remove(force=True)


def serve_command(model: Model, knobs: Knobs) -> list[str]:
    """`python -m lab.cli.serve --exec` in the image renders the argv from the image's own
    registry and becomes the server, so the container's stats measure the server alone."""
    pairs = [f"{f.name}={getattr(knobs, f.name)}" for f in fields(knobs)]
    return [
        "python",
        "-m",
        "lab.cli.serve",
        model.name,
        *("--host", "0.0.0.0", "--allow-remote"),  # the container's own network; see compose.yaml
        "--exec",  # the container's memory and CPU are the server's alone; `docker stop` kills
        "--port",
        str(CONTAINER_PORT),
        *(arg for pair in pairs for arg in ("--knob", pair)),
    ]


class DockerBackend:
    name = "docker"

    def __init__(
        self,
        run_id: str,
        layout: CpuLayout,
        limits: ContainerLimits | None = None,
        image: str = DEFAULT_IMAGE,
        ready_timeout_s: float = READY_TIMEOUT_S,
        client: Any = None,
    ) -> None:
        self.run_id = run_id
        self.ready_timeout_s = ready_timeout_s
        self.layout = layout
        self.limits = limits or ContainerLimits()
        self.client = client or connect()
        try:
            self.image = self.client.images.get(image)
        except Exception:
            raise Refused(
                f"Docker image {image} not found; build it with docker/build-image.sh"
            ) from None
        self.image_name = image
        self.labels = {RUN_LABEL: run_id}
        reaper = [sys.executable, "-m", "lab.backends.containers", run_id]
        tether.WATCHER.on_death(f"containers-{run_id}", reaper)  # removed if the lab dies
        self.network = self.client.networks.create(
            f"lab-{run_id}", driver="bridge", labels=self.labels
        )
        self.upstream: ContainerServer | None = None

    def _run(
        self,
        name: str,
        command: list[str],
        port: int,
        cpuset: tuple[int, ...],
        environment: dict[str, str],
    ) -> ContainerServer:
        container = self.client.containers.run(
            self.image.id,
            command,
            name=f"lab-{self.run_id}-{name}",
            detach=True,
            labels={**self.labels, "concurrency-lab.role": name},
            environment=environment,
            ports={f"{CONTAINER_PORT}/tcp": ("127.0.0.1", port)},
            network=self.network.name,
            **self.limits.run_kwargs(cpuset),
        )
        server = ContainerServer(name, f"http://127.0.0.1:{port}", command, container)
        wait_ready(server, self.ready_timeout_s)
        return server

    def start_upstream(self, spec: UpstreamSpec, port: int) -> ContainerServer:
        flags = spec.argv_flags()
        command = upstream_argv(CONTAINER_PORT, *flags, host="0.0.0.0", python="python")
        self.upstream = self._run("upstream", command, port, self.layout.client, {})
        return self.upstream

    def start_server(
        self, model: Model, knobs: Knobs, upstream_url: str, port: int
    ) -> ContainerServer:
        if self.upstream is None or upstream_url != self.upstream.url:
            raise LabError("the docker backend serves models only with its own upstream")
        inside = f"http://{self.upstream.container.name}:{CONTAINER_PORT}"  # the run's network DNS
        return self._run(
            model.name,
            serve_command(model, knobs),
            port,
            self.layout.server,
            {"LAB_UPSTREAM_URL": inside},
        )

    def loadgen_cpus(self) -> tuple[int, ...]:
        return self.layout.client

    def describe(self) -> dict[str, Any]:
        return {
            "backend": self.name,
            "image": self.image_name,
            "image_id": self.image.id,
            "image_digests": self.image.attrs.get("RepoDigests", []),
            "limits": {
                **asdict(self.limits),
                "hardening": "non-root 10001, read-only root, "
                "cap_drop ALL, no-new-privileges, init",
            },
            "run_label": f"{RUN_LABEL}={self.run_id}",
            "network": self.network.name,
            "traffic": "host load generator -> 127.0.0.1 published ports -> containers",
            "cpu_layout": {
                "server": list(self.layout.server),
                "client_and_upstream": list(self.layout.client),
            },
        }

    def close(self) -> None:
        """Remove every container and the network this run started (found by its label)."""
        remove_run(self.client, self.run_id)
        tether.WATCHER.cancel(f"containers-{self.run_id}")


def remove_run(client: Any, run_id: str) -> None:
    label = f"{RUN_LABEL}={run_id}"
    for container in client.containers.list(all=True, filters={"label": label}):
        with contextlib.suppress(Exception):
            container.remove(force=True)
    for network in client.networks.list(filters={"label": label}):
        with contextlib.suppress(Exception):
            network.remove()


def connect() -> Any:
    try:
        import docker

        client = docker.from_env()  # type: ignore[attr-defined]
        client.ping()
    except ImportError:
        raise LabError("the docker backend needs the Docker SDK: pip install docker") from None
    except Exception as e:
        raise Refused(
            f"no Docker Engine reachable ({e}); start Docker or use --backend native"
        ) from None
    return client


def wait_ready(server: ContainerServer, timeout_s: float) -> None:
    """Wait for /health like a native start; a container that fails it is removed."""
    try:
        wait_http(server, server.url + "/health", timeout_s)
    except StartFailed:
        server.stop()
        raise


if __name__ == "__main__":  # the watcher's command for a lab that died: remove its containers
    remove_run(connect(), sys.argv[1])
