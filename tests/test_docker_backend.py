"""The Docker backend: limits from tuning/, the stats meter, the container command, and a real
sweep whose containers are all removed afterwards (also when a model fails to start); the path a
published port's connections take, and uwsgi-blog's cases through a real published port.

The real sweep needs a Docker Engine and the lab image and is opt-in with LAB_DOCKER_TESTS=1
(docker/ci-smoke.sh sets it after building the image).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from docker_env import IMAGE, compose_tool, docker_skip_reason
from rich.console import Console

from experiments import uwsgi_blog
from experiments.common import reproduce
from lab.backends.base import CpuLayout
from lab.backends.containers import (
    RUN_LABEL,
    ContainerLimits,
    ContainerMeter,
    DockerBackend,
    serve_command,
)
from lab.backends.published import port_path, proxy_of
from lab.cli.reproduce import EXPERIMENTS
from lab.config.models import load_registry
from lab.config.scenario import UpstreamSpec, load_scenario, override
from lab.run.plan import plan_run
from lab.run.sweep import Sweep
from lab.system.procs import StartFailed, free_port
from lab.system.tuning import read_nofile, read_sysctls
from tests.helpers import step_rows

SKIP_REASON = docker_skip_reason(compose_tool())
needs_docker = pytest.mark.skipif(SKIP_REASON is not None, reason=SKIP_REASON or "")


def test_tuning_files_parse(tmp_path: Path) -> None:
    conf = tmp_path / "sysctl.conf"
    conf.write_text(
        "# comment\nnet.core.somaxconn = 4096\n\nnet.ipv4.ip_local_port_range =  1024\t65535\n"
    )
    assert read_sysctls(conf) == {
        "net.core.somaxconn": "4096",
        "net.ipv4.ip_local_port_range": "1024 65535",
    }
    limits = tmp_path / "limits.conf"
    limits.write_text("# x\n*  soft  nofile  100\n*  hard  nofile  200\n")
    assert read_nofile(limits) == {"soft": 100, "hard": 200}
    assert {"net.core.somaxconn", "net.ipv4.ip_local_port_range"} <= set(read_sysctls())


def test_limits_carry_the_hardening() -> None:
    kwargs = ContainerLimits(cpus=0.5).run_kwargs(cpuset=(1,))
    assert kwargs["nano_cpus"] == 500_000_000 and kwargs["cpuset_cpus"] == "1"
    assert kwargs["user"] == "10001:10001" and kwargs["read_only"] and kwargs["init"]
    assert kwargs["cap_drop"] == ["ALL"] and kwargs["security_opt"] == ["no-new-privileges:true"]
    assert kwargs["sysctls"] == read_sysctls()
    assert "cpuset_cpus" not in ContainerLimits().run_kwargs(cpuset=())


class FakeContainer:
    """Returns canned one-shot stats: 0.5 s of CPU per call, 100 MB used of which 20 MB cache."""

    def __init__(self) -> None:
        self.calls = 0

    def stats(self, stream: bool, one_shot: bool) -> dict[str, Any]:
        assert not stream and one_shot
        self.calls += 1
        return {
            "cpu_stats": {"cpu_usage": {"total_usage": self.calls * 500_000_000}},
            "memory_stats": {"usage": 100 * 2**20, "stats": {"total_inactive_file": 20 * 2**20}},
        }


def test_meter_reports_cpu_percent_and_memory_like_docker_stats(monkeypatch) -> None:
    clock = iter([10.0, 11.0])
    monkeypatch.setattr("lab.backends.containers.time.monotonic", lambda: next(clock))
    now = ContainerMeter(FakeContainer()).sample()
    assert (now.cpu_pct, now.rss_mb, now.pss_mb) == (50.0, 80.0, 80.0)  # the cgroup: pages once


def test_container_command_passes_every_resolved_knob() -> None:
    registry = load_registry()
    knobs = registry.knobs.resolve(50)
    argv = serve_command(registry.models["uwsgi-gevent"], knobs)
    assert argv[:4] == ["python", "-m", "lab.cli.serve", "uwsgi-gevent"]
    assert "concurrency=50" in argv and "pool=50" in argv and f"backlog={knobs.backlog}" in argv


def labelled(run_id: str) -> list[str]:
    """Ids of the containers and networks that still carry the run's label."""
    label = ["--filter", f"label={RUN_LABEL}={run_id}"]
    found = []
    for argv in (["docker", "ps", "-aq"], ["docker", "network", "ls", "-q"]):
        done = subprocess.run([*argv, *label], capture_output=True, text=True, timeout=30)
        found += done.stdout.split()
    return found


class Quiet:
    """A sweep listener that records problems only."""

    def __init__(self) -> None:
        self.problems: list[str] = []

    def model_started(self, *_: Any) -> None: ...
    def preflight_done(self, *_: Any) -> None: ...
    def phase(self, *_: Any) -> None: ...
    def step_done(self, *_: Any) -> None: ...

    def problem(self, model: str, message: str) -> None:
        self.problems.append(f"{model}: {message}")


@needs_docker
def test_docker_sweep_fills_container_cpu_and_memory_and_cleans_up(tmp_path: Path) -> None:
    registry = load_registry()
    scenario = override(
        load_scenario("quick"),
        models=("gunicorn-gevent",),
        levels=(1, 10),
        duration_s=2.0,
        warmup_s=0.0,
    )
    plan = plan_run(scenario, registry.pick(list(scenario.models)), registry.knobs, tmp_path)
    backend = DockerBackend(plan.run_id, CpuLayout.split(True), image=IMAGE)
    listener = Quiet()
    Sweep(plan, backend, listener).run()
    assert listener.problems == []
    assert labelled(plan.run_id) == []
    manifest = json.loads((plan.run_dir / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["backend"] == "docker"
    assert manifest["execution"]["image_id"].startswith("sha256:")
    assert manifest["execution"]["limits"]["nofile"] == read_nofile()
    steps = step_rows(plan.run_dir)
    assert [s["users"] for s in steps] == [1, 10]
    for step in steps:
        assert step["ok"] > 0 and not step["errors"], step["flags"]
        assert step["server_cpu_pct"] > 0 and step["server_rss_mb"] > 0
        assert step["upstream_max_inflight"] == step["users"]


@needs_docker
def test_a_model_that_fails_to_start_leaves_no_container(tmp_path: Path) -> None:
    registry = load_registry()
    backend = DockerBackend(f"failtest-{os.getpid()}", CpuLayout(), image=IMAGE)
    try:
        upstream = backend.start_upstream(UpstreamSpec(delay_ms=10), free_port())
        knobs = registry.knobs.updated({"backlog": 100_000}, "test").resolve(1)  # > somaxconn
        with pytest.raises(StartFailed) as failed:
            backend.start_server(registry.models["uwsgi-threads"], knobs, upstream.url, free_port())
        assert failed.value.evidence["log_tail"]
        assert len(labelled(backend.run_id)) == 2  # only the upstream and the network are left
    finally:
        backend.close()
    assert labelled(backend.run_id) == []


@needs_docker
@pytest.mark.parametrize(
    ("sig", "code", "status"),
    [(signal.SIGINT, 130, "interrupted"), (signal.SIGKILL, -signal.SIGKILL, "running")],
    ids=["ctrl-c", "killed"],
)
def test_a_stopped_or_killed_docker_run_removes_its_containers(
    tmp_path: Path, sig: signal.Signals, code: int, status: str
) -> None:
    """Ctrl-C: the run removes them itself; SIGKILL: its watcher does (lab.system.tether)."""
    argv = [
        sys.executable,
        "-c",
        "from lab.cli.main import entry; entry()",
        "run",
        "--backend",
        "docker",
        "--models",
        "gunicorn-gevent",
        "--levels",
        "1,5",
        "--duration",
        "30",
        "--warmup",
        "0",
        "--out",
        str(tmp_path),
    ]
    run = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        role = "label=concurrency-lab.role=gunicorn-gevent"
        while time.monotonic() < deadline and run.poll() is None:
            found = subprocess.run(
                ["docker", "ps", "-q", "--filter", role], capture_output=True, text=True, timeout=30
            )
            if found.stdout.strip() and list(tmp_path.iterdir()):
                break
            time.sleep(0.5)
        time.sleep(2)  # into the measured step
        run.send_signal(sig)
        assert run.wait(timeout=60) == code
    finally:
        if run.poll() is None:
            run.kill()
    (run_dir,) = tmp_path.iterdir()
    deadline = time.monotonic() + 30  # the watcher's removal runs after the lab is gone
    while labelled(run_dir.name) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert labelled(run_dir.name) == []
    assert json.loads((run_dir / "manifest.json").read_text())["status"] == status


def test_the_proxy_of_a_port_is_found_by_its_process(tmp_path: Path) -> None:
    """docker-proxy's argv names the host port it listens on; another port's proxy, or another
    program with the same flag, is not it."""
    argvs = {
        "7": "/usr/sbin/docker-proxy -proto tcp -host-ip 127.0.0.1 -host-port 3000 "
        "-container-ip 172.17.0.2 -container-port 3000",
        "8": "/usr/sbin/docker-proxy -proto tcp -host-ip 127.0.0.1 -host-port=4000",
        "9": "/bin/other -host-port 5000",
    }
    for pid, argv in argvs.items():
        (tmp_path / pid).mkdir()
        (tmp_path / pid / "cmdline").write_bytes(argv.replace(" ", "\0").encode() + b"\0")
    assert proxy_of(3000, tmp_path) == {"pid": 7, "argv": argvs["7"].split()}
    assert proxy_of(4000, tmp_path)["pid"] == 8  # type: ignore[index]
    assert proxy_of(5000, tmp_path) is None and proxy_of(3001, tmp_path) is None
    assert port_path(1)["path"] == "nat"  # no proxy listens on port 1 here


def leftover_published() -> list[str]:
    done = subprocess.run(
        ["docker", "ps", "-aq", "--filter", "name=lab-published-"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    return done.stdout.split()


@needs_docker
def test_uwsgi_blog_cases_through_a_published_port(tmp_path: Path) -> None:
    """The blog's cases with uWSGI in the lab image and the client on this host: each row
    measured (or one line where ab is missing), the path named, the counters read on both sides
    of the port, the blog's listen-queue settings as set inside, no container left behind."""
    docker = tuple(c for c in uwsgi_blog.scaled_cases(50) if c.docker)
    assert len(docker) == 4
    p = uwsgi_blog.Protocol(
        sleep_s=0.05,
        cases=docker,
        deadline_s=10,
        seconds_sleep_s=0.05,
        seconds_deadline_s=10,
        image=IMAGE,
    )
    quiet = Console(file=(tmp_path / "out.txt").open("w"))
    path = reproduce(EXPERIMENTS["uwsgi-blog"], "test", tmp_path, p, quiet)
    rows = {r["section"]: r for r in json.loads((path / "reproduction.json").read_text())["rows"]}
    for case in docker:
        r = rows[case.name]
        if str(r["measured"]).startswith("skipped: "):
            assert case.client == "ab" and "\n" not in r["measured"], r["measured"]
            continue
        ev = r["evidence"]
        assert isinstance(r["measured"], float), r["note"]
        assert ev["path"]["path"] in ("docker-proxy", "nat")
        assert (ev["path"]["path"] == "docker-proxy") == ("pid" in ev["path"])
        for side in ("counters", "host_counters"):
            assert {"ListenOverflows", "ListenDrops", "TCPSynRetrans"} <= set(ev[side])
        assert all(ev["settings"][k] == v for k, v in case.settings)
        assert "via " + ev["path"]["path"] in r["note"]
    assert leftover_published() == []
