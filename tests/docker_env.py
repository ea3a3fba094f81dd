"""What the Docker tests need and how to reach it: the Compose tool, the lab image, the opt-in.

Why opt-in (LAB_DOCKER_TESTS=1, set by docker/ci-smoke.sh after it builds the image): bringing
containers up takes a minute or two, too slow for every `pytest` run of the native suite.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

IMAGE = os.environ.get("LAB_IMAGE", "concurrency-lab:latest")
ROOT = Path(__file__).resolve().parent.parent
COMPOSE_FILE = ROOT / "compose.yaml"
HEALTHY_WITHIN_S = 90.0


def compose_tool() -> list[str] | None:
    """`docker compose` (v2 plugin) if present, else the standalone `docker-compose`."""
    if shutil.which("docker"):
        probe = subprocess.run(["docker", "compose", "version"], capture_output=True, timeout=30)
        if probe.returncode == 0:
            return ["docker", "compose"]
    return ["docker-compose"] if shutil.which("docker-compose") else None


def docker_skip_reason(compose: list[str] | None) -> str | None:
    """Why the smoke run cannot happen here, or None if it can."""
    if os.environ.get("LAB_DOCKER_TESTS") != "1":
        return "Docker smoke tests are opt-in: run docker/ci-smoke.sh (sets LAB_DOCKER_TESTS=1)"
    if compose is None or not shutil.which("docker"):
        return "no docker CLI or Compose tool"
    if subprocess.run(["docker", "info"], capture_output=True, timeout=30).returncode != 0:
        return "no Docker Engine reachable (docker info failed)"
    if (
        subprocess.run(
            ["docker", "image", "inspect", IMAGE], capture_output=True, timeout=30
        ).returncode
        != 0
    ):
        return f"image {IMAGE} missing: build it with docker/build-image.sh"
    return None


COMPOSE = compose_tool()


def compose(
    *args: str, project: str | None = None, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    assert COMPOSE is not None, "no Compose tool"
    argv = [*COMPOSE, "-f", str(COMPOSE_FILE), *(["-p", project] if project else []), *args]
    return subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
    )


def docker_json(*args: str) -> list[dict]:
    done = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=60, check=True)
    return json.loads(done.stdout)


def project_ids(project: str, kind: str = "ps") -> list[str]:
    label = f"label=com.docker.compose.project={project}"
    argv = ["docker", "ps", "-aq"] if kind == "ps" else ["docker", "network", "ls", "-q"]
    done = subprocess.run([*argv, "--filter", label], capture_output=True, text=True, timeout=60)
    return done.stdout.split()


def wait_healthy(project: str, deadline: float) -> list[str]:
    """Poll until every container with a healthcheck is healthy; return the ones that are not."""
    while True:
        ids = project_ids(project)
        states = docker_json("inspect", *ids) if ids else []
        pending = [
            c["Name"]
            for c in states
            if c["State"].get("Health", {}).get("Status", "healthy") != "healthy"
            or c["State"]["Status"] != "running"
        ]
        if (states and not pending) or time.monotonic() > deadline:
            return pending or ([] if states else ["no containers"])
        time.sleep(1)
