"""The mock slow upstream: a third-party API that answers after a delay, over real TCP.

Runs as its own process group on loopback. Each `/delay` request waits a fixed time or one drawn
per request from a distribution, and can be made to fail or stall, so the lab can play a brownout.
Any other path and method is answered the same way, as an app's own API calls (`POST
/v1/charges`) would be, with a rule's delay, status and body where `--routes` gives one, and
calls are counted per route. `/stats` reports requests served, the in-flight high-water mark
(which proves how much concurrency actually reached the upstream) and the calls per route;
`/stats/reset` starts a window; `/config` changes the delay and faults while running. Two engines
serve the same API: `fast` (raw asyncio protocol on uvloop + httptools, the default) and
`aiohttp` (the original, the fallback when those two are missing). `--processes N` runs N
processes on one port (SO_REUSEPORT) sharing one set of counters.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import random
import signal
import socket
import sys

from servers import upstream_routes
from servers.upstream_model import DISTRIBUTIONS, Delay, Faults
from servers.upstream_state import Settings, SharedState

__all__ = ["DISTRIBUTIONS", "Delay", "Faults", "main", "parse_args"]
ENGINES = ("auto", "fast", "aiohttp")
PR_SET_PDEATHSIG = 1


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=18081)
    p.add_argument("--delay-ms", type=float, default=100.0, help="mean delay (default 100)")
    p.add_argument("--distribution", choices=DISTRIBUTIONS, default="fixed")
    p.add_argument("--error-rate", type=float, default=0.0, help="fraction answered 500")
    p.add_argument("--stall-rate", type=float, default=0.0, help="fraction stalled --stall-ms more")
    p.add_argument("--stall-ms", type=float, default=0.0)
    p.add_argument("--backlog", type=int, default=4096)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--processes", type=int, default=1, help="processes sharing the port")
    p.add_argument("--engine", choices=ENGINES, default="auto", help="auto: fast if installed")
    p.add_argument("--routes", default="[]", help="per-route rules, a JSON list (from the lab)")
    args = p.parse_args(argv)
    if args.processes < 1:
        p.error("--processes must be at least 1")
    return args


def engine_serve(name: str):  # type: ignore[no-untyped-def]
    """The chosen engine's serve(state, slot, sock, rng); auto = fast when it can be imported."""
    if name in ("auto", "fast"):
        try:
            from servers import upstream_fast

            return upstream_fast.serve
        except ImportError:
            if name == "fast":
                raise
    from servers import upstream_aiohttp

    return upstream_aiohttp.serve


def listen(host: str, port: int, backlog: int, shared: bool) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if shared:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.listen(backlog)
    sock.setblocking(False)
    return sock


def run_worker(args: argparse.Namespace, state: SharedState, slot: int) -> None:
    serve = engine_serve(args.engine)
    sock = listen(args.host, args.port, args.backlog, shared=args.processes > 1)
    seed = None if args.seed is None else args.seed + slot
    serve(state, slot, sock, random.Random(seed))


def stop_on_signals() -> None:
    """SIGTERM, SIGINT and SIGHUP exit 128 + the signal, the lab's exit codes for a stop."""
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda signum, _: sys.exit(128 + signum))


def supervise(args: argparse.Namespace, state: SharedState) -> None:
    """Fork one worker per process; when any exits or we are told to stop, stop them all."""
    children = []
    for slot in range(args.processes):
        pid = os.fork()
        if pid == 0:  # the worker dies with us, even on SIGKILL
            with contextlib.suppress(OSError, AttributeError):
                ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
            run_worker(args, state, slot)
            os._exit(0)
        children.append(pid)
    stop_on_signals()
    try:
        os.wait()
    finally:
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    settings = Settings(
        Delay(args.delay_ms, args.distribution),
        Faults(args.error_rate, args.stall_rate, args.stall_ms),
    )
    state = SharedState(args.processes, settings, upstream_routes.load(args.routes))
    if args.processes == 1:
        stop_on_signals()
        run_worker(args, state, 0)
    else:
        supervise(args, state)


if __name__ == "__main__":
    main()
