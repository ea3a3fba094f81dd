"""`python -m lab.cli.dbserve postgres|redis [--host H] [--port P]`: one database in the foreground.

Why: Compose's `databases` profile runs PostgreSQL and Redis as services of their own, and they
must be the servers a native run starts (lab.backends.databases: a fresh temporary directory, the
same
settings, trust auth), not a hand-made copy that drifts. This waits until the database answers,
says so, and stops and removes it on SIGTERM (`docker compose down`) or when it exits.
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

STARTERS = {"postgres": databases.start_postgres, "redis": databases.start_redis}
PORTS = {"postgres": 5432, "redis": 6379}


def _stop(signum: int, _: FrameType | None) -> None:
    raise SystemExit(128 + signum)


def serve(kind: str, host: str, port: int) -> int:
    """Start the database, wait while it runs, stop it; the exit code."""
    run_dir = Path(tempfile.mkdtemp(prefix=f"lab-{kind}-"))
    port = port or PORTS[kind]
    db = STARTERS[kind](run_dir, host, port)
    print(f"lab dbserve: {kind} ready on {host}:{port}", flush=True)
    try:
        while db.proc is not None and db.proc.alive():
            time.sleep(1.0)
        print(f"lab dbserve: {kind} exited; see {run_dir / 'logs'}", file=sys.stderr)
        return 1
    finally:
        databases.stop(db)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.cli.dbserve", description=__doc__)
    parser.add_argument("kind", choices=sorted(STARTERS))
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=0, help="default: 5432 / 6379")
    args = parser.parse_args(argv)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _stop)
    try:
        return serve(args.kind, args.host, args.port)
    except LabError as e:
        print(f"lab dbserve: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
