"""Compose's profiles, each brought up on its own with the lab image (opt-in like the stack's
smoke run, tests/test_compose.py): real PostgreSQL and Redis behind the models, the models behind
nginx, the sweep writing results to the host.
"""

from __future__ import annotations

import http.client
import json
import os
import time
import urllib.request
from pathlib import Path

import pytest
from docker_env import (
    COMPOSE,
    HEALTHY_WITHIN_S,
    IMAGE,
    compose,
    docker_skip_reason,
    project_ids,
    wait_healthy,
)

from lab.system.procs import free_port
from servers.common import expected_body, io_body
from tests.helpers import step_rows

SKIP_REASON = docker_skip_reason(COMPOSE)
needs_docker = pytest.mark.skipif(SKIP_REASON is not None, reason=SKIP_REASON or "")


@needs_docker
def test_databases_profile_serves_db_and_cache_routes() -> None:
    """`--profile databases`: real PostgreSQL and Redis containers (lab.cli.dbserve), healthy, and a
    model answering /db (pg_sleep) and /cache (BLPOP) through them with the exact bodies."""
    project = f"labdb{os.getpid()}"
    port = free_port()
    env = {"LAB_IMAGE": IMAGE, "LAB_PORT_GUNICORN_GEVENT": str(port)}
    env["LAB_UPSTREAM_PORT"] = str(free_port())
    services = ("postgres", "redis", "gunicorn-gevent")
    start = time.monotonic()
    try:
        up = compose("--profile", "databases", "up", "-d", *services, project=project, env=env)
        pending = wait_healthy(project, start + HEALTHY_WITHIN_S)
        assert up.returncode == 0 and not pending, f"up: {up.stderr[-2000:]}\nunhealthy: {pending}"
        for path in ("/db?delay_ms=50", "/cache?delay_ms=50"):
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=30) as reply:
                assert reply.status == 200 and reply.read() == expected_body(path), path
    finally:
        down = ("--profile", "databases", "down", "-v", "--remove-orphans", "-t", "5")
        compose(*down, project=project, env=env)
    assert project_ids(project) == [] and project_ids(project, kind="network") == []


@needs_docker
def test_front_profile_serves_models_behind_nginx_with_its_cpu_apart() -> None:
    """`--profile front`: a uWSGI model (uwsgi_pass, unix socket) and an HTTP one (proxy_pass)
    behind nginx in their containers, non-root and read-only: exact bodies over one kept-alive
    client connection, and each meter reports nginx's CPU and memory apart from the server's."""
    project = f"labfront{os.getpid()}"
    services = ("uwsgi-threads-nginx", "gunicorn-asyncio-nginx")
    ports = {name: free_port() for name in services}
    env = {"LAB_IMAGE": IMAGE, "LAB_UPSTREAM_PORT": str(free_port()), "LAB_DELAY_MS": "20"}
    env |= {f"LAB_PORT_{n.upper().replace('-', '_')}": str(p) for n, p in ports.items()}
    start = time.monotonic()
    try:
        up = compose("--profile", "front", "up", "-d", *services, project=project, env=env)
        pending = wait_healthy(project, start + HEALTHY_WITHIN_S)
        assert up.returncode == 0 and not pending, f"up: {up.stderr[-2000:]}\nunhealthy: {pending}"
        for name, port in ports.items():
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            for _ in range(3):  # one connection: nginx keeps clients alive for every model
                conn.request("GET", "/io?delay_ms=10")
                reply = conn.getresponse()
                assert reply.status == 200 and reply.read() == io_body(200)[0], name
            conn.close()
            meter = "import urllib.request as u; print(u.urlopen('http://127.0.0.1:9100/').read().decode())"
            said = compose("exec", "-T", name, "python", "-c", meter, project=project, env=env)
            answer = json.loads(said.stdout)
            assert answer["rss_mb"] > 0 and answer["front"]["rss_mb"] > 0, (name, said.stderr)
    finally:
        compose(
            "--profile",
            "front",
            "down",
            "-v",
            "--remove-orphans",
            "-t",
            "5",
            project=project,
            env=env,
        )
    assert project_ids(project) == [] and project_ids(project, kind="network") == []


@needs_docker
def test_sweep_profile_writes_results_to_the_host(tmp_path: Path) -> None:
    tmp_path.chmod(0o777)  # the sweep runs as uid 10001, not as the test's user
    project = f"labsweep{os.getpid()}"
    env = {"LAB_RESULTS_DIR": str(tmp_path), "LAB_IMAGE": IMAGE}
    try:
        done = compose(
            "--profile",
            "sweep",
            "run",
            "--rm",
            "sweep",
            "lab",
            "run",
            "--models",
            "gunicorn-gevent",
            "--levels",
            "1,5",
            "--duration",
            "1",
            "--warmup",
            "0",
            "--out",
            "/app/results",
            project=project,
            env=env,
            timeout=180,
        )
    finally:
        compose("--profile", "sweep", "down", "-v", "--remove-orphans", project=project, env=env)
    assert project_ids(project) == [] and project_ids(project, kind="network") == []
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    (run_dir,) = tmp_path.iterdir()
    assert json.loads((run_dir / "manifest.json").read_text())["status"] == "complete"
    steps = step_rows(run_dir)
    assert [s["users"] for s in steps] == [1, 5]
    assert all(s["ok"] > 0 and not s["errors"] for s in steps)
