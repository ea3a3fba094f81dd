"""`lab generator --connect HOST:PORT`: load-generator workers for a lab run on another machine.

Why: one machine's cores may not be enough to load a fast server without measuring the client.
The lab run (`lab run --remote-generators M --master HOST:PORT`) starts a locust master for every
step and waits for M workers; on each machine that lends cores, this command keeps `--generators`
workers ready, each pinned to its own core. A worker serves one step and exits with it, so this
command starts a fresh one for the next step, until `--steps` measured steps are served (a
model's warm-up is served too but not counted: the user counts the steps they asked for), no
master answered for `--master-timeout` seconds, or Ctrl-C. It says where it waits and for how
long; no master at all is this machine's state, not the arguments' (exit 3,
docs/failures-and-stops.md). A step on oha (the lab's default engine where it can) runs each
worker's share on this machine's own oha (`scripts/setup.sh` builds it), which hands its records
over after the window (`loadgen.oha.remote`).
"""

from __future__ import annotations

import os
import socket
import sys
import time
from pathlib import Path

import click

from lab.cli.common.options import count_option, file_option, renamed, shown
from lab.cli.common.stopping import stopped_code
from lab.record.errors import LabError, NoAnswer, Refused
from lab.run import generators
from lab.system import procs

# After a round, how long the last step's master may take to let go of its port (it exits
# within a second or two of quitting its workers).
GONE_WAIT_S = 10.0


def serve(master: str, processes: int, steps: int, log_path: Path, timeout_s: float) -> int:
    """Run rounds of workers, each once a master answers; return how many measured steps were
    served. No master within `timeout_s` before the first step is Refused (exit 3); workers
    that fail before serving one are NoAnswer (exit 1)."""
    cores = sorted(os.sched_getaffinity(0))
    served, rounds = 0, 0
    while steps == 0 or served < steps:
        if rounds:  # the last step's master quit its workers: wait until it is gone too
            master_gone(master, GONE_WAIT_S)
        click.echo(
            f"waiting for a generator master at {master} (up to {timeout_s:g} s: --master-timeout)",
            err=True,
        )
        if not master_answers(master, timeout_s):
            if not rounds:
                raise Refused(
                    f"no generator master answered at {master} within {timeout_s:g} s "
                    "(--master-timeout): start the run first (lab run --remote-generators N "
                    f"--master {master}) or check the address"
                )
            click.echo(f"no master for {timeout_s:g} s: done ({served} steps served)", err=True)
            break
        rounds += 1
        workers = [
            start_worker(master, cores[i % len(cores)], i, log_path) for i in range(processes)
        ]
        codes = set(wait_all(workers))
        what = generators.served(codes)
        if what == "failed" and not served:
            raise NoAnswer(f"no step served: workers exited {sorted(codes)}; see {log_path}")
        if what == "failed":
            click.echo(
                f"no step from {master} (worker exit codes {sorted(codes)}); stopping", err=True
            )
            break
        if what == "step":
            served += 1
            click.echo(f"served step {served} for {master}", err=True)
        elif what == "warmup":
            click.echo(f"served a warm-up for {master} (not counted)", err=True)
    return served


def master_gone(master: str, timeout_s: float) -> bool:
    """Whether the master's port refuses a connection within `timeout_s` (tried every 50 ms).
    Why: a master quits its workers before its own process exits, so for a moment after a
    round its port still answers; a worker started then joins the dying master, is never
    introduced to the next step's master on the same port, and that step waits for it in vain.
    The lab starts the next master in a new process only after the last one exited, so the
    port always refuses in between."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not _connects(master, timeout_s=0.2):
            return True
        time.sleep(0.05)
    return False


def _connects(master: str, timeout_s: float) -> bool:
    host, _, port = master.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            return True
    except OSError:
        return False


def master_answers(master: str, timeout_s: float) -> bool:
    """Whether the master's port accepts a connection within `timeout_s` (tried every half
    second): workers start only then, so the wait is this command's, said and bounded, not
    locust's own silent connect retries (about 5 minutes)."""
    deadline = time.monotonic() + timeout_s
    while not _connects(master, timeout_s=1.0):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.5)
    return True


def start_worker(master: str, core: int, index: int, log_path: Path) -> procs.Proc:
    argv = [sys.executable, "-m", "loadgen.worker_node", master, "--cpu", str(core)]
    return procs.start(f"generator-{index + 1}", argv, log_path=log_path)


def wait_all(workers: list[procs.Proc]) -> list[int]:
    """Exit codes of every worker; Ctrl-C stops them all."""
    try:
        while any(w.alive() for w in workers):
            time.sleep(0.2)
    except KeyboardInterrupt:
        for w in workers:
            w.stop(grace_s=2.0)
        raise
    return [int(w.popen.returncode) for w in workers]


@click.command("generator")
@click.option(
    "--connect",
    "master",
    required=True,
    metavar="HOST:PORT",
    help="The lab run's generator master (its --master), e.g. 127.0.0.1:5557.",
)
@count_option(
    "--generators",
    "processes",
    least=1,
    default=1,
    help="Load-generator processes (locust workers) on this machine, each pinned to its own "
    "core; they count toward the run's --remote-generators.",
)
@renamed("--processes", "processes")
@count_option(
    "--steps",
    least=0,
    default=0,
    help="Stop after serving this many measured steps; warm-ups are served but not counted "
    "(0: until no master comes, or Ctrl-C).",
)
@file_option(
    "--log",
    "log_path",
    default=Path("lab-generator.log"),
    show_default=True,
    help="Where the workers' own messages go.",
)
@click.option(
    "--allow-remote",
    is_flag=True,
    help="Allow a master that is not on loopback. Only for machines you own.",
)
@shown(
    "--master-timeout",
    "timeout_s",
    type=click.FloatRange(min=0, max=86400),
    default=300.0,
    help="Seconds to wait for a master before giving up: before the first step exit 3, after "
    "a served step the end.",
)
def generator(
    master: str,
    processes: int,
    steps: int,
    log_path: Path,
    allow_remote: bool,
    timeout_s: float,
) -> None:
    """Lend this machine's cores to a lab run: locust workers for its generator master.

    The run must be started with as many --remote-generators as you start here in total, and with
    --master HOST:PORT reachable from this machine (a non-loopback one needs --allow-remote there).
    """
    try:
        generators.check_master(master, allow_remote)
    except LabError as e:
        raise click.BadParameter(
            str(e).replace("--master", "--connect"), param_hint="--connect"
        ) from None
    try:
        serve(master, processes, steps, log_path, timeout_s)
    except KeyboardInterrupt as e:
        click.echo("interrupted: workers stopped", err=True)
        sys.exit(stopped_code(e))
