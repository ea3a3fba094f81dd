"""`lab upstream`: the mock upstream alone in the foreground, for benchmarks and other tools.

Why: to measure the upstream itself (wrk, hey), or to give another load tool the same slow API the
lab's servers call, without writing its command line by hand. It runs `python -m
servers.upstream` in the foreground as `lab serve` runs a server
(lab.cli.common.stopping.foreground): Ctrl-C, SIGTERM or SIGHUP stop it and exit 128 + the
signal, and it dies with this command.
"""

from __future__ import annotations

import shlex
import sys

import click

from lab.cli.common.options import (
    choice_option,
    delay_ms_option,
    port_option,
    renamed,
    share_option,
    shown,
)
from lab.cli.common.stopping import foreground
from lab.config import upstreamroute
from lab.config.scenario import LIMITS
from lab.system import procs, safety
from lab.system.resources import CODE_ROOT
from servers.upstream_model import DISTRIBUTIONS

ENGINES = ("auto", "fast", "aiohttp")
DEFAULT_UPSTREAM_PORT = 18081


@click.command("upstream")
@port_option(DEFAULT_UPSTREAM_PORT, "Port to listen on.")
@shown("--host", default="127.0.0.1", help="Address to listen on.")
@delay_ms_option("Mean delay of /delay in milliseconds when a request does not give ?ms=N.")
@choice_option(
    "--distribution",
    choices=DISTRIBUTIONS,
    default="fixed",
    help="How each delay is drawn around --delay-ms (every one with that mean): fixed, uniform "
    "on [0, twice it], exponential or lognormal.",
)
@share_option(
    "--error-rate",
    help="Share of requests answered 500, after their delay (the scenario's error_rate).",
)
@share_option(
    "--stall-rate",
    help="Share of requests that wait --stall-ms more.",
)
@shown(
    "--stall-ms",
    default=0.0,
    type=click.FloatRange(0, LIMITS["stall_ms"]),
    help="Extra wait of a stalled request, in milliseconds.",
)
@shown(
    "--upstream-processes",
    "processes",
    default=1,
    type=click.IntRange(1, 256),
    help="Upstream processes sharing the port (SO_REUSEPORT): add one per core the upstream "
    "may use.",
)
@renamed("--processes", "processes")
@choice_option(
    "--upstream-engine",
    "engine",
    choices=ENGINES,
    default="auto",
    help="fast: asyncio protocol on uvloop + httptools; aiohttp: the fallback; auto: fast if "
    "installed.",
)
@renamed("--engine", "engine")
@click.option(
    "--upstream-route",
    "routes",
    multiple=True,
    metavar="RULE",
    help="One route's answer, [METHOD ]/PATH=DELAY[ STATUS[ BODY]], e.g. "
    "'POST /v1/charges=250ms' (repeatable); every other path waits --delay-ms.",
)
@click.option("--allow-remote", is_flag=True, help="Allow a non-loopback --host.")
def upstream(
    port: int,
    host: str,
    delay_ms: float,
    distribution: str,
    error_rate: float,
    stall_rate: float,
    stall_ms: float,
    processes: int,
    engine: str,
    routes: tuple[str, ...],
    allow_remote: bool,
) -> None:
    """Run the mock upstream in the foreground (any path waits; GET /delay?ms=N, /stats, POST
    /stats/reset)."""
    safety.check_host(host, "--host", allow_remote=allow_remote)
    procs.ensure_port_free(host, port, "upstream")  # busy: Refused, exit 3
    argv = [
        sys.executable,
        "-m",
        "servers.upstream",
        "--host",
        host,
        "--port",
        str(port),
        "--delay-ms",
        str(delay_ms),
        "--distribution",
        distribution,
        "--error-rate",
        str(error_rate),
        "--stall-rate",
        str(stall_rate),
        "--stall-ms",
        str(stall_ms),
        "--processes",
        str(processes),
        "--engine",
        engine,
        *(["--routes", upstreamroute.as_json(routes)] if routes else []),
    ]
    print(
        f"lab upstream on http://{host}:{port} (Ctrl-C stops)\n  {shlex.join(argv)}",
        file=sys.stderr,
        flush=True,
    )
    sys.exit(foreground("upstream", argv, cwd=CODE_ROOT))
