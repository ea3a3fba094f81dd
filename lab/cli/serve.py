"""`lab serve MODEL`: run one model's server in the foreground, as the registry declares it.

Why: in a container the server must be the main process (so signals, `init: true` and healthchecks
reach it), and its command line must be the one the native sweep uses, not a hand-typed copy that
drifts. This command renders the registry's argv template and replaces itself with the server.
With `--meter-port`, a meter (`lab.webui.meter`) serves the server's CPU and memory on that port,
on the server's own address, for the web UI's lab page, which has no Docker socket to ask.
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

import click

from lab.cli.options import port_option, standalone
from lab.cli.run_options import MODELS_FILE
from lab.config.models import Knobs, alias_notes, load_registry, parse_knobs, server_env
from lab.system import safety
from lab.webui.meter import detach

DEFAULT_UPSTREAM_URL = "http://upstream:8080"


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
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
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
@click.option(
    "--max-users",
    default=200,
    show_default=True,
    type=click.IntRange(min=1),
    help='What "auto" knobs resolve to: the most simultaneous users you will drive.',
)
# The old name, hidden: "concurrency" is the per-process knob only (--knob concurrency=N).
@click.option("--max-concurrency", type=click.IntRange(min=1), hidden=True)
@MODELS_FILE
@click.option(
    "--meter-port",
    default=0,
    type=click.IntRange(0, 65535),
    help="Serve the server's CPU, RSS and PSS on this port (lab.webui.meter); 0: no meter.",
)
@click.option(
    "--upstream-url",
    envvar="LAB_UPSTREAM_URL",
    default=DEFAULT_UPSTREAM_URL,
    show_default=True,
    help="Base URL of the mock upstream (env LAB_UPSTREAM_URL).",
)
def serve(
    model: str,
    host: str,
    port: int,
    knobs: tuple[str, ...],
    max_users: int,
    max_concurrency: int | None,
    models_file: Path | None,
    meter_port: int,
    upstream_url: str,
    allow_remote: bool,
) -> None:
    """Run MODEL's server in the foreground (the container entry point)."""
    safety.check_host(host, "--host", allow_remote=allow_remote)
    if max_concurrency is not None:
        max_users = max_concurrency
        print(f"lab serve: note: --max-concurrency is now --max-users={max_users}", file=sys.stderr)
    argv, env, resolved = serve_argv(model, host, port, knobs, max_users, models_file, upstream_url)
    print(f"lab serve {model}: {resolved}\n  {shlex.join(argv)}", file=sys.stderr, flush=True)
    if meter_port:  # on the server's own address: loopback unless --allow-remote
        meter = ["--pid", str(os.getpid()), "--host", host, "--port", str(meter_port)]
        remote = ["--allow-remote"] if allow_remote else []
        detach([sys.executable, "-m", "lab.webui.meter", *meter, *remote])
    os.execvpe(argv[0], argv, env)


if __name__ == "__main__":  # compose.yaml's entry point: errors exit as `lab serve`'s do
    standalone(serve)
