"""`lab ui`: the models, the upstream and the locust web UI with the lab page, natively.

For users without Docker: the same UI as `docker compose up`, every listener on 127.0.0.1. The
servers start exactly as `lab run` starts them (NativeBackend, the registry's command lines);
locust loads the users (loadgen/locustfile.py) and the lab page (lab/webui/page.py) and is told
where
each model is (LAB_TARGETS) and which process to measure (LAB_SERVER_PIDS). Ctrl-C, SIGTERM or
SIGHUP stops every process it started and exits 128 + the signal; a SIGKILL leaves them to the
watcher (lab.system.tether), so nothing is left running either way.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path
from typing import cast

import click

from lab.backends.base import HOST, Backend, CpuLayout, LocalServer, NativeBackend
from lab.cli.common.options import (
    delay_ms_option,
    dir_option,
    max_users_option,
    port_option,
    renamed,
    shown,
)
from lab.cli.measure.run_options import FRONT_OPTIONS
from lab.config.models import load_registry
from lab.config.scenario import UpstreamSpec, load_scenario
from lab.front.nginx import Front, variants
from lab.front.serve import FrontedBackend, FrontedServer
from lab.record.errors import NoAnswer
from lab.system import procs
from lab.system.procstats import FRONT_PIDS_ENV, PIDS_ENV
from lab.system.resources import CODE_ROOT
from lab.webui.liveflags import cores_env

ROOT = CODE_ROOT
LOCUSTFILES = "loadgen/locustfile.py,lab/webui/page.py"
# Every model of the quick scenario, so every model its answer (the README's) can recommend.
DEFAULT_MODELS = ",".join(load_scenario("quick").models)


def locust_argv(port: int, out: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "locust",
        "-f",
        LOCUSTFILES,
        "--class-picker",
        "--users",
        "20",
        "--spawn-rate",
        "20",
        "--web-host",
        HOST,
        "--web-port",
        str(port),
        "--lab-out",
        str(out),
    ]


def start_all(
    models: list[str],
    port: int,
    concurrency: int,
    delay_ms: float,
    out: Path,
    logs: Path,
    front: Front | None = None,
) -> tuple[Backend, procs.Proc]:
    """Upstream, each model (behind nginx too, with a front), then locust; a failure stops
    what was started (by the caller)."""
    registry = load_registry()
    chosen = registry.pick(models)
    knobs = registry.knobs.resolve(concurrency)
    for model in chosen:
        model.check_installed(knobs)
    chosen = variants(chosen, front.names) if front else chosen
    procs.ensure_port_free(HOST, port, "locust web UI")
    native = NativeBackend(logs, CpuLayout.split(pin=True))
    backend: Backend = native
    if front is not None and front.binary:
        backend = FrontedBackend(native, front.knobs, front.binary)
    upstream = backend.start_upstream(UpstreamSpec(delay_ms=delay_ms), procs.free_port())
    servers = [
        cast(LocalServer | FrontedServer, backend.start_server(m, knobs, upstream.url, port_))
        for m, port_ in ((m, procs.free_port()) for m in chosen)
    ]
    env = {
        **os.environ,
        "LAB_UPSTREAM_URL": upstream.url,
        **cores_env(len(native.layout.server), int(knobs.processes)),
        "LAB_TARGETS": ",".join(f"{s.name}={s.url}" for s in servers),
        PIDS_ENV: ",".join(f"{s.name}={s.proc.pid}" for s in servers),
        FRONT_PIDS_ENV: ",".join(
            f"{s.name}={s.front.pid}" for s in servers if isinstance(s, FrontedServer)
        ),
    }
    ui = procs.start(
        "locust",
        locust_argv(port, out),
        log_path=logs / "logs" / "locust.log",
        env=env,
        cwd=ROOT,
        cpus=native.layout.client,
    )
    procs.wait_http(ui, f"http://{HOST}:{port}/", 60)
    return backend, ui


@click.command("ui")
@port_option(8089, "Port of the locust web UI on 127.0.0.1.")
@shown(
    "--models",
    default=DEFAULT_MODELS,
    help="Models to start, comma separated (see `lab models`); the default is the quick "
    "scenario's, every model its answer can recommend.",
)
@max_users_option("concurrency")
@renamed("--concurrency", "concurrency")
@renamed("--workers", "concurrency")  # older still: gunicorn's word for processes
@delay_ms_option("The upstream's default delay (the UI's start form sets each request's).")
@dir_option(
    "--out",
    default="results",
    show_default=True,
    help="Where the lab page's Save button writes result directories.",
)
@FRONT_OPTIONS[0]
@FRONT_OPTIONS[1]
def ui(
    port: int,
    models: str,
    concurrency: int,
    delay_ms: float,
    out: Path,
    front: str | None,
    front_knobs: dict[str, int | str],
) -> None:
    """Start the models, the upstream and the locust web UI with the lab page on 127.0.0.1."""
    names = [m.strip() for m in models.split(",") if m.strip()]
    fronted = Front.of(front, front_knobs, "native")
    load_registry().pick(names)  # bad --models: exit 2 before its log folder is made
    logs = Path(tempfile.mkdtemp(prefix="lab-ui-"))
    try:
        backend, locust = start_all(
            names, port, concurrency, delay_ms, out.resolve(), logs, fronted
        )
        click.echo(
            f"lab ui: http://{HOST}:{port}  (lab page: /lab/; logs in {logs}); "
            "Ctrl-C stops everything",
            err=True,
        )
        while locust.alive():
            time.sleep(0.5)
        code = locust.popen.poll()
        raise NoAnswer(f"locust exited by itself with code {code}; see {locust.log_path}")
    except KeyboardInterrupt:  # Ctrl-C, SIGTERM, SIGHUP (lab.cli.common.stopping): exit 128 + it
        click.echo("lab ui: stopping", err=True)
        raise
    finally:
        stopped = procs.stop_all()
        click.echo(f"lab ui: stopped {', '.join(stopped) or 'nothing'}", err=True)
