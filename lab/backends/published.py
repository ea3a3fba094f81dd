"""A container reached from this host through a port published on 127.0.0.1, and the path its
connections take there.

Why: a load test against a published port (`docker run -p`) measures more than the server. Where
the Docker Engine runs its userland proxy (docker-proxy; dockerd's `userland-proxy` is on unless
configured off), a connect to 127.0.0.1:PORT is accepted by the proxy at once and the proxy then
opens a connection of its own to the container: a full listen queue in the container drops the
proxy's SYNs, not the client's, and the SYN backoff that follows happens where the client cannot
see it. Without the proxy the engine forwards the port with NAT rules and the client's own SYNs
reach the container's queue. `port_path` says which one carries a port, from the processes here.

The container gets the sweep backend's hardening (lab.backends.containers) with the caller's
sysctls, carries a label of its own and is removed when the block ends, however it ends.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lab.backends.containers import (
    RUN_LABEL,
    ContainerLimits,
    ContainerServer,
    remove_run,
    wait_ready,
)
from lab.record.errors import LabError

PROXY = "docker-proxy"


@dataclass(frozen=True)
class Published:
    """A started container: its URL on this host, the SDK object, seconds until it answered."""

    url: str
    container: Any
    ready_s: float


def image_or_why(client: Any, image: str) -> str | None:
    """None when `image` is here; else one line that says how to get it."""
    try:
        client.images.get(image)
    except Exception:
        return f"Docker image {image} not found; build it with docker/build-image.sh"
    return None


def proxy_of(port: int, proc: Path = Path("/proc")) -> dict[str, Any] | None:
    """The docker-proxy process that listens on `port` of this host, or None."""
    for cmdline in proc.glob("[0-9]*/cmdline"):
        try:
            argv = cmdline.read_bytes().decode(errors="replace").split("\0")
        except OSError:  # gone meanwhile
            continue
        if Path(argv[0]).name == PROXY and str(port) in flag_values(argv, "-host-port"):
            return {"pid": int(cmdline.parent.name), "argv": [a for a in argv if a]}
    return None


def flag_values(argv: Sequence[str], flag: str) -> list[str]:
    """Values of `flag` in argv, as `-flag value` or `-flag=value`."""
    found = [b for a, b in zip(argv, argv[1:], strict=False) if a == flag]
    return found + [a.split("=", 1)[1] for a in argv if a.startswith(flag + "=")]


def port_path(port: int) -> dict[str, Any]:
    """How connections to 127.0.0.1:`port` reach the container, with what shows it."""
    proxy = proxy_of(port)
    if proxy:
        return {
            "path": PROXY,
            "says": f"through {PROXY} (pid {proxy['pid']}, the engine's userland proxy): it "
            "accepts each connect itself and dials the container",
            **proxy,
        }
    return {
        "path": "nat",
        "says": f"no {PROXY} process on this host for port {port}: the engine forwards it with "
        "NAT rules (userland-proxy off), or runs elsewhere (a VM); the client's own SYNs "
        "reach the container",
    }


def exec_text(container: Any, argv: Sequence[str]) -> str:
    """What `docker exec CONTAINER argv...` prints; LabError where it fails."""
    code, out = container.exec_run(list(argv))
    if code != 0:
        raise LabError(f"docker exec {' '.join(argv)} failed ({code}): {out[-200:]!r}")
    return str(out.decode(errors="replace"))


@contextmanager
def published(
    client: Any,
    image: str,
    command: Sequence[str],
    ports: tuple[int, int],
    environment: Mapping[str, str],
    sysctls: Mapping[str, str],
    cpuset: tuple[int, ...] = (),
    ready_timeout_s: float = 60.0,
) -> Iterator[Published]:
    """Run `command` in `image` with container port ports[0] published on 127.0.0.1:ports[1],
    until the block ends; used once its /health answers. No CPU quota: every CPU, or `cpuset`."""
    label = f"published-{os.getpid()}-{ports[1]}"
    limits = ContainerLimits(cpus=float(os.cpu_count() or 1), sysctls=dict(sysctls))
    t0 = time.perf_counter()
    try:
        try:
            container = client.containers.run(
                image,
                list(command),
                name=f"lab-{label}",
                detach=True,
                labels={RUN_LABEL: label},
                environment=dict(environment),
                ports={f"{ports[0]}/tcp": ("127.0.0.1", ports[1])},
                **limits.run_kwargs(cpuset),
            )
        except Exception as e:  # the engine refused it (a sysctl, the port): why, in one line
            raise LabError(f"docker run {image} failed: {str(e).splitlines()[0]}") from None
        server = ContainerServer(label, f"http://127.0.0.1:{ports[1]}", list(command), container)
        wait_ready(server, ready_timeout_s)
        yield Published(server.url, container, time.perf_counter() - t0)
    finally:
        remove_run(client, label)
