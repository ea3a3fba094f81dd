"""`lab serve MODEL`: run one model's server in the foreground, as the registry declares it.

Why: a container's command must be the server the native sweep runs, not a hand-typed copy that
drifts: this command renders the registry's argv template and runs it. It stays in the foreground
as the server's parent (the server in a process group of its own, tied to this process's life by
lab.system.tether) rather than replacing itself with the server: its stop handlers are in place
before the server starts, so SIGTERM, SIGINT or SIGHUP at any moment -- even while uWSGI is still
starting and would lose it -- stops the whole group (TERM, then KILL after a grace period) and
exits 128 + the signal; a server that exits by itself exits this command with 1. With `--exec`
(the Docker backend's containers, whose stats must be the server's alone and whose life `docker
stop` bounds, escalating to SIGKILL) it replaces itself with the server instead.
With `--meter-port`, a meter (`lab.webui.meter`) serves the server's CPU and memory on that port,
on the server's own address, for the web UI's lab page, which has no Docker socket to ask.

With `--front nginx` the model is served as deployed (Compose's `front` profile): nginx on the
port, the server behind it as `lab run --front nginx` starts it (`lab.front.serve`); the meter
reports nginx's CPU and memory apart from the server's.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import cast

import click

from lab.backends.base import CpuLayout, NativeBackend
from lab.cli.common.options import choice_option, max_users_option, port_option, renamed, shown
from lab.cli.common.stopping import foreground, standalone
from lab.cli.measure.run_options import FRONT_OPTIONS, MODELS_FILE
from lab.cli.upstream import DEFAULT_UPSTREAM_PORT
from lab.config.models import Knobs, alias_notes, load_registry, parse_knobs, server_env
from lab.front.nginx import Front, variants
from lab.front.serve import FrontedBackend, FrontedServer
from lab.record.errors import LabError
from lab.system import procs, safety

# Where `lab upstream` listens by default, so the default works natively; compose.yaml and the
# Docker backend name the container's upstream (http://upstream:8080) in LAB_UPSTREAM_URL.
DEFAULT_UPSTREAM_URL = f"http://127.0.0.1:{DEFAULT_UPSTREAM_PORT}"


def serve_argv(
    model_name: str,
    host: str,
    port: int,
    knob_pairs: tuple[str, ...],
    max_users: int,
    models_file: Path | None,
    upstream_url: str,
) -> tuple[list[str], dict[str, str], Knobs]:
    """The exact command and environment `lab run` would start this model with."""
    registry = load_registry(models_file)
    (model,) = registry.pick([model_name])
    overrides = parse_knobs(knob_pairs)
    for note in alias_notes(overrides):
        print(f"lab serve {model_name}: note: {note}", file=sys.stderr, flush=True)
    knobs = registry.knobs.updated(overrides, "--knob").resolve(max_users)
    model.check_installed(knobs)
    return model.command(knobs, host, port), server_env(model, knobs, upstream_url), knobs


@click.command("serve")
@click.argument("model")
@shown(
    "--host",
    default="127.0.0.1",
    help="Address to listen on; non-loopback needs --allow-remote (a container: 0.0.0.0).",
)
@click.option(
    "--allow-remote",
    is_flag=True,
    help="Allow a non-loopback --host (inside a container, whose ports Compose publishes on "
    "127.0.0.1).",
)
@port_option(8000, "Port to listen on.")
@click.option(
    "--knob",
    "knobs",
    multiple=True,
    metavar="NAME=VALUE",
    help="Override a knob (repeatable), e.g. concurrency=200 or processes=2.",
)
@max_users_option("max_users")
# The old name: "concurrency" is the per-process knob only (--knob concurrency=N).
@renamed("--max-concurrency", "max_users")
@MODELS_FILE
@shown(
    "--meter-port",
    default=0,
    type=click.IntRange(0, 65535),
    help="Serve the server's CPU, RSS and PSS on this port (lab.webui.meter); 0: no meter.",
)
@shown(
    "--upstream-url",
    envvar="LAB_UPSTREAM_URL",
    default=DEFAULT_UPSTREAM_URL,
    help="Base URL of the mock upstream (env LAB_UPSTREAM_URL): by default `lab upstream`'s on "
    "this machine; in containers compose.yaml sets http://upstream:8080.",
)
@choice_option(
    "--front",
    choices=("bare", "nginx"),
    default="bare",
    help="nginx: the server behind nginx, as deployed and as `lab run --front nginx` starts it "
    "(one server, one front: `lab run --front bare,nginx` measures both side by side); bare: "
    "the server alone.",
)
@FRONT_OPTIONS[1]
@click.option(
    "--exec",
    "replace",
    is_flag=True,
    help="Replace this command with the server (no parent beside it, so a container's memory is "
    "the server's alone: the Docker backend's containers). Only where something else bounds the "
    "server's life and turns a SIGTERM it loses while starting into SIGKILL (`docker stop`).",
)
def serve(
    model: str,
    host: str,
    port: int,
    knobs: tuple[str, ...],
    max_users: int,
    models_file: Path | None,
    meter_port: int,
    upstream_url: str,
    allow_remote: bool,
    front: str,
    front_knobs: dict[str, int | str],
    replace: bool,
) -> None:
    """Run MODEL's server in the foreground (the container entry point); with --front nginx,
    behind nginx, as deployed."""
    safety.check_host(host, "--host", allow_remote=allow_remote)
    fronted = Front.of(None if front == "bare" else front, front_knobs, "native")
    if replace and (fronted is not None or meter_port):
        raise LabError("lab serve --exec: the server alone, without --front or --meter-port")
    argv, env, resolved = serve_argv(model, host, port, knobs, max_users, models_file, upstream_url)
    meter = Meter(host, meter_port, allow_remote)
    if fronted is not None:
        sys.exit(
            serve_fronted(model, models_file, resolved, fronted, upstream_url, (host, port), meter)
        )
    print(f"lab serve {model}: {resolved}\n  {shlex.join(argv)}", file=sys.stderr, flush=True)
    if replace:
        os.execvpe(argv[0], argv, env)
    sys.exit(foreground(model, argv, env=env, beside=lambda server: meter.start(server.pid)))


class Meter:
    """The meter beside the server (`lab.webui.meter`), on the server's own address: loopback
    unless --allow-remote; port 0: none."""

    def __init__(self, host: str, port: int, allow_remote: bool) -> None:
        self.host, self.port, self.allow_remote = host, port, allow_remote

    def start(self, pid: int, front_pid: int = 0) -> None:
        if not self.port:
            return
        argv = ["--pid", str(pid), "--host", self.host, "--port", str(self.port)]
        argv += ["--front-pid", str(front_pid)] if front_pid else []
        argv += ["--allow-remote"] if self.allow_remote else []
        procs.start("meter", [sys.executable, "-m", "lab.webui.meter", *argv], log_path=None)


def serve_fronted(
    name: str,
    models_file: Path | None,
    knobs: Knobs,
    front: Front,
    upstream_url: str,
    where: tuple[str, int],
    meter: Meter,
) -> int:
    """MODEL behind nginx until a stop signal (or either exits); both stopped on the way out. The
    exit code: 128 + the signal (`standalone`), or 1 when a process died."""
    (model,) = variants(load_registry(models_file).pick([name]), ("nginx",))
    run_dir = Path(tempfile.mkdtemp(prefix="lab-serve-"))  # logs, nginx's prefix, the socket
    native = NativeBackend(run_dir, CpuLayout(), host=where[0])
    backend = FrontedBackend(native, front.knobs, front.binary)
    try:
        server = cast(FrontedServer, backend.start_server(model, knobs, upstream_url, where[1]))
        said = f"lab serve {model.name}: {knobs}, nginx {front.knobs}\n  {shlex.join(server.argv)}"
        print(said, flush=True)
        meter.start(server.proc.pid, server.front.pid)
        while server.alive():
            time.sleep(1.0)
        print(f"lab serve {model.name}: a process exited; logs in {run_dir}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # stopped by a signal: nothing to keep (a failure keeps its logs)
        backend.close()
        shutil.rmtree(run_dir, ignore_errors=True)
        raise
    finally:
        backend.close()
        procs.stop_all()  # the meter


if __name__ == "__main__":  # compose.yaml's entry point: errors exit as `lab serve`'s do
    standalone(serve)
