"""compose.yaml: valid, hardened, in step with tuning/, and a real smoke run of the whole stack.

The static checks need only a Compose tool. The smoke run needs a Docker Engine and the lab image
(docker/build-image.sh) and is opt-in with LAB_DOCKER_TESTS=1, which docker/ci-smoke.sh sets after
building the image: it brings the stack up under its own project name on free loopback ports,
checks health, bodies, the locust UI and a headless locust run per model, drives the web UI and
its lab page in a real browser (tests/uibrowser.py) and saves a run to the host, inspects the
hardening, and checks that `down` leaves nothing behind.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import uibrowser
import yaml
from docker_env import (
    COMPOSE,
    COMPOSE_FILE,
    HEALTHY_WITHIN_S,
    IMAGE,
    compose,
    docker_json,
    docker_skip_reason,
    project_ids,
    wait_healthy,
)
from uibrowser import needs_chromium

from lab.config.models import load_registry
from lab.config.scenario import load_scenario
from lab.record.models import ASYNC_PORT
from lab.system.procs import free_port
from lab.system.tuning import read_nofile, read_sysctls
from servers.common import io_body
from tests.helpers import step_rows

# Every model the quick scenario (and so the README's answer) can recommend has a service, in the
# default stack and behind nginx in the front profile.
CORE_MODELS = tuple(load_scenario("quick").models)
PORT_VARS = {
    "upstream": "LAB_UPSTREAM_PORT",
    **{m: "LAB_PORT_" + m.upper().replace("-", "_") for m in CORE_MODELS},
    "locust": "LAB_UI_PORT",
    "locust-master": "LAB_MASTER_PORT",
}
ASYNC_MODELS = tuple(
    m.name for m in load_registry().pick(list(CORE_MODELS)) if m.runs_app() == ASYNC_PORT
)


needs_compose = pytest.mark.skipif(COMPOSE is None, reason="no Compose tool installed")


def resolved_config(*profiles: str) -> dict:
    flags = [arg for p in profiles for arg in ("--profile", p)]
    done = compose(*flags, "config")
    assert done.returncode == 0, done.stderr
    return yaml.safe_load(done.stdout)


def raw_services() -> dict:
    return yaml.safe_load(COMPOSE_FILE.read_text())["services"]


def host_ips(ports: list) -> list[str]:
    """The host address of each published port, in short ("IP:HOST:CONTAINER") or long syntax."""
    return [p.get("host_ip", "") if isinstance(p, dict) else p.rsplit(":", 2)[0] for p in ports]


# ---- static checks (a Compose tool, no engine) ----------------------------------------------


@needs_compose
@pytest.mark.parametrize(
    "profiles",
    [(), ("baselines",), ("sweep",), ("front",)],
    ids=["default", "baselines", "sweep", "front"],
)
def test_compose_config_is_valid(profiles: tuple[str, ...]) -> None:
    services = resolved_config(*profiles)["services"]
    assert set(CORE_MODELS) <= set(services)
    assert "version" not in yaml.safe_load(COMPOSE_FILE.read_text())


def test_baselines_and_sweep_sit_behind_profiles() -> None:
    services = raw_services()
    assert services["gunicorn-gthread"]["profiles"] == ["baselines"]
    assert services["gunicorn-sync"]["profiles"] == ["baselines"]
    assert services["sweep"]["profiles"] == ["sweep"]
    assert all("profiles" not in services[name] for name in CORE_MODELS)
    assert all(services[f"{name}-nginx"]["profiles"] == ["front"] for name in CORE_MODELS)


@needs_compose
def test_every_published_port_is_bound_to_loopback() -> None:
    services = resolved_config("baselines", "sweep")["services"]
    for name, service in services.items():
        assert set(host_ips(service.get("ports", []))) <= {"127.0.0.1"}, name


@needs_compose
def test_every_service_is_limited_and_hardened() -> None:
    for name, s in resolved_config("baselines", "sweep")["services"].items():
        assert str(s["user"]).split(":")[0] != "0", name
        assert s["read_only"] is True and s["init"] is True, name
        assert s["cap_drop"] == ["ALL"], name
        profiled = name == "sweep" or "--meter-port" in s.get("command", [])  # py-spy reads them
        assert s.get("cap_add", []) == (["SYS_PTRACE"] if profiled else []), name
        assert "no-new-privileges:true" in s["security_opt"], name
        assert any(t.startswith("/tmp") for t in s["tmpfs"]), name
        assert float(s["cpus"]) > 0 and s["mem_limit"] and int(s["pids_limit"]) > 0, name


@needs_compose
def test_limits_mirror_tuning_files() -> None:
    nofile = read_nofile()
    for name, s in resolved_config("baselines", "sweep")["services"].items():
        sysctls = {k: " ".join(str(v).split()) for k, v in s["sysctls"].items()}
        assert sysctls == read_sysctls(), name
        assert {k: int(v) for k, v in s["ulimits"]["nofile"].items()} == nofile, name


@needs_compose
def test_model_services_are_served_from_the_registry() -> None:
    services = resolved_config("baselines", "front")["services"]
    for name in (*CORE_MODELS, "gunicorn-gthread", "gunicorn-sync"):
        assert services[name]["command"][:4] == ["python", "-m", "lab.cli.serve", name]
    for name in CORE_MODELS:  # the same command, behind nginx
        fronted = services[f"{name}-nginx"]["command"]
        assert fronted[:6] == ["python", "-m", "lab.cli.serve", name, "--front", "nginx"]
        assert fronted[6:] == services[name]["command"][4:]


# ---- the smoke run (engine + image, opt-in) ------------------------------------------------


SKIP_REASON = docker_skip_reason(COMPOSE)
needs_docker = pytest.mark.skipif(SKIP_REASON is not None, reason=SKIP_REASON or "")


@dataclass
class Stack:
    project: str
    ports: dict[str, int]
    up_seconds: float
    results: Path  # LAB_RESULTS_DIR: where the lab page saves runs, on this host

    def containers(self) -> list[dict]:
        ids = project_ids(self.project)
        return docker_json("inspect", *ids) if ids else []

    def container_of(self, service: str) -> str:
        for c in self.containers():
            if c["Config"]["Labels"]["com.docker.compose.service"] == service:
                return c["Id"]
        raise AssertionError(f"no container for {service}")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    project = f"labsmoke{os.getpid()}"
    ports = {service: free_port() for service in PORT_VARS}
    results = tmp_path_factory.mktemp("compose-results")
    results.chmod(0o777)  # locust runs as uid 10001, not as the test's user
    env = {PORT_VARS[s]: str(p) for s, p in ports.items()}
    env.update(LAB_IMAGE=IMAGE, LAB_DELAY_MS="50", LAB_RESULTS_DIR=str(results))
    start = time.monotonic()
    try:
        up = compose("up", "-d", project=project, env=env, timeout=HEALTHY_WITHIN_S + 30)
        pending = wait_healthy(project, start + HEALTHY_WITHIN_S)
        assert up.returncode == 0 and not pending, f"up: {up.stderr[-2000:]}\nunhealthy: {pending}"
        yield Stack(project, ports, time.monotonic() - start, results)
    finally:
        compose("down", "-v", "--remove-orphans", "-t", "5", project=project, env=env)


@needs_docker
def test_stack_is_healthy_within_90_s(stack: Stack) -> None:
    assert stack.up_seconds < HEALTHY_WITHIN_S
    services = {c["Config"]["Labels"]["com.docker.compose.service"] for c in stack.containers()}
    assert services == {"upstream", *CORE_MODELS, "locust", "locust-worker"}


@needs_docker
@pytest.mark.parametrize("model", CORE_MODELS, ids=CORE_MODELS)
def test_each_model_answers_with_the_expected_body(stack: Stack, model: str) -> None:
    url = f"http://127.0.0.1:{stack.ports[model]}/io?delay_ms=10"
    with urllib.request.urlopen(url, timeout=10) as reply:
        assert reply.status == 200
        assert reply.read() == io_body(200)[0]


@needs_docker
def test_locust_ui_answers_with_a_worker_and_every_model(stack: Stack) -> None:
    base = f"http://127.0.0.1:{stack.ports['locust']}"
    with urllib.request.urlopen(base + "/", timeout=10) as reply:
        page = reply.read().decode()
    assert all(model in page for model in CORE_MODELS)  # the class picker offers each model
    with urllib.request.urlopen(base + "/lab/data", timeout=10) as reply:  # the lab page's rows
        labels = {row["model"]: row["your_app"] for row in json.load(reply)["models"]}
    assert {m for m in CORE_MODELS if labels.get(m) == ASYNC_PORT} == set(ASYNC_MODELS) != set()
    deadline = time.monotonic() + 30
    while True:
        with urllib.request.urlopen(base + "/stats/requests", timeout=10) as reply:
            workers = json.load(reply).get("worker_count", 0)
        if workers >= 1 or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert workers >= 1


@needs_docker
@pytest.mark.parametrize("model", CORE_MODELS, ids=CORE_MODELS)
def test_headless_locust_run_from_the_locust_container(stack: Stack, model: str) -> None:
    done = subprocess.run(
        [
            "docker",
            "exec",
            stack.container_of("locust"),
            "locust",
            "-f",
            "loadgen/locustfile.py",
            "--headless",
            "-u",
            "5",
            "-r",
            "5",
            "-t",
            "3s",
            "--only-summary",
            "--json",
            "--skip-log",
            model,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    stats = json.loads(done.stdout)
    assert sum(s["num_requests"] for s in stats) > 0
    assert sum(s["num_failures"] for s in stats) == 0


@needs_docker
@needs_chromium
def test_browser_compares_two_models_and_saves_a_run_to_the_host(stack: Stack) -> None:
    """The issue's walk-through against `docker compose up`: the lab page's figures come from the
    locust worker (forwarded to the master) and each container's meter (no Docker socket)."""
    url = f"http://127.0.0.1:{stack.ports['locust']}"
    w = uibrowser.Walk(url, ("uwsgi-gevent", "gunicorn-asyncio"), 20, 50, label="compose")
    seen = uibrowser.walk(w)
    uibrowser.check_figures(seen, w, metered=True)
    saved = Path(seen.saved_on_host)
    assert Path(seen.saved).parent == Path("/app/results") and saved.parent == stack.results
    text = uibrowser.report(saved)
    assert all(model in text for model in w.models)
    steps = step_rows(saved)
    assert sorted(s["model"] for s in steps) == sorted(w.models)
    assert all(s["ok"] > 0 and s["server_cpu_pct"] > 0 for s in steps), steps


@needs_docker
def test_containers_run_non_root_and_hardened(stack: Stack) -> None:
    for c in stack.containers():
        name, host = c["Name"], c["HostConfig"]
        assert c["Config"]["User"] == "10001:10001", name
        assert host["ReadonlyRootfs"] and host["Init"], name
        assert host["CapDrop"] == ["ALL"], name
        assert "no-new-privileges:true" in host["SecurityOpt"], name
        assert host["NanoCpus"] > 0 and host["Memory"] > 0 and host["PidsLimit"] > 0, name
        assert read_sysctls().items() <= host["Sysctls"].items(), name
        for bindings in (host["PortBindings"] or {}).values():
            assert all(b["HostIp"] == "127.0.0.1" for b in bindings), name
        uid = subprocess.run(
            ["docker", "exec", c["Id"], "id", "-u"], capture_output=True, text=True, timeout=30
        )
        assert uid.stdout.strip() == "10001", name


@needs_docker
def test_down_leaves_no_container_or_network(stack: Stack) -> None:
    done = compose("down", "-v", "--remove-orphans", "-t", "5", project=stack.project)
    assert done.returncode == 0, done.stderr
    assert project_ids(stack.project) == []
    assert project_ids(stack.project, kind="network") == []
