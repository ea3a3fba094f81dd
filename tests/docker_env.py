"""What the Docker tests need and how to reach it: the Compose tool, the lab image, the opt-in.

Why opt-in (LAB_DOCKER_TESTS=1, set by docker/ci-smoke.sh after it builds the image): bringing
containers up takes a minute or two, too slow for every `pytest` run of the native suite.
"""

from __future__ import annotations

import os
import shutil
import subprocess

IMAGE = os.environ.get("LAB_IMAGE", "concurrency-lab:latest")


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
