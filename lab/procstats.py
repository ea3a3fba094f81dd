"""Server CPU and RSS per model for the lab page: the native process tree, or its container.

Why here and not in loadgen: finding a server (a pid `lab ui` started, a Compose service's
container) is the lab's knowledge. `lab ui` passes the pids in LAB_SERVER_PIDS; in Compose,
LAB_DOCKER_STATS=1 finds each model's container by its Compose service label.
"""

from __future__ import annotations

import contextlib
import os

import psutil

from lab.sampling import Meter, TreeMeter

PIDS_ENV = "LAB_SERVER_PIDS"  # model=pid,... of the native servers
DOCKER_ENV = "LAB_DOCKER_STATS"  # "1": read the models' Compose containers through the Docker API


def pairs(text: str) -> dict[str, str]:
    """`a=1,b=2` into {"a": "1", "b": "2"} (the shape of every LAB_* list variable)."""
    items = (p.partition("=") for p in text.split(",") if p.strip())
    return {k.strip(): v.strip() for k, _, v in items}


def meters(models: list[str]) -> dict[str, Meter]:
    """A meter per model that can be measured; a model with none shows no CPU or RSS."""
    out: dict[str, Meter] = {}
    for model, pid in pairs(os.environ.get(PIDS_ENV, "")).items():
        with contextlib.suppress(psutil.Error, ValueError):
            out[model] = TreeMeter(int(pid))
    if os.environ.get(DOCKER_ENV) == "1":
        out.update(_container_meters([m for m in models if m not in out]))
    return out


def _container_meters(models: list[str]) -> dict[str, Meter]:
    from lab.docker_backend import ContainerMeter, connect

    client = connect()
    out: dict[str, Meter] = {}
    for model in models:
        found = client.containers.list(filters={"label": f"com.docker.compose.service={model}"})
        if found:
            out[model] = ContainerMeter(found[0])
    return out
