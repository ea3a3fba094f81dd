"""`python -m lab.cli.dbserve postgres|redis [--host H] [--port P] [--trust-peers]`: one database
in the foreground.

Why: Compose's `databases` profile runs PostgreSQL and Redis as services of their own, and they
must be the servers a native run starts (lab.backends.databases: a fresh temporary directory, the
same settings), not a hand-made copy that drifts. This waits until the database answers, says so,
and stops and removes it on SIGTERM (`docker compose down`), SIGINT or SIGHUP (exit 128 + the
signal) or when it exits (1). It listens on 127.0.0.1 and trusts loopback only unless told: a
container passes `--host 0.0.0.0 --trust-peers` (trust the hosts of its own Compose network, which
no one outside it reaches). Errors exit with the table's codes (a missing PostgreSQL or Redis: 3).
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import time
from pathlib import Path
from types import FrameType

from lab.backends import databases
from lab.record.errors import LabError
from lab.system import procs

STARTERS = {"postgres": databases.start_postgres, "redis": databases.start_redis}
PORTS = {"postgres": 5432, "redis": 6379}


def _stop(signum: int, _: FrameType | None) -> None:
    raise SystemExit(128 + signum)


def serve(kind: str, host: str, port: int, trust_peers: bool) -> int:
    """Start the database, wait while it runs, stop it; the exit code."""
    run_dir = Path(tempfile.mkdtemp(prefix=f"lab-{kind}-"))
    port = port or PORTS[kind]
    db = STARTERS[kind](run_dir, host, port, trust_peers)
    print(f"lab dbserve: {kind} ready on {host}:{port}", flush=True)
    try:
        while db.proc is not None and db.proc.alive():
            time.sleep(1.0)
        print(f"lab dbserve: {kind} exited; see {run_dir / 'logs'}", file=sys.stderr)
        return 1
    finally:
        databases.stop(db)


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m lab.cli.dbserve", description=__doc__)
    parser.add_argument("kind", choices=sorted(STARTERS))
    parser.add_argument("--host", default="127.0.0.1", help="default: 127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="default: 5432 / 6379")
    parser.add_argument(
        "--trust-peers",
        action="store_true",
        help="trust every host of this host's own subnets (no password): inside a container only",
    )
    return parser


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, _stop)
    try:
        return serve(args.kind, args.host, args.port, args.trust_peers)
    except LabError as e:
        print(f"lab dbserve: {e}", file=sys.stderr)
        return e.exit_code
    finally:
        procs.stop_all()  # a database stopped while it started


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
