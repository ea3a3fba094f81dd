"""Benchmark (not a test): pauses of 0.3, 1 and 5 s made in a real app under gevent and under
threads, as the verdict names them (`lab.verdict.pauses`): from the answers per 100 ms, or where
those are too thin, from the requests held through the pause (`lab.verdict.clusters`).

Each case is one closed-loop step on the lab's generator against `tests/pausing_server.py`
(gevent: a blocking call stops its event loop; threads: a lock every request takes is held), one
pause 0.5 s into a window 2.5 s longer than the pause: 8 users of 10 ms requests (the bins tell
it), and 2 users of 100 ms requests (about 2 answers per 100 ms: the held requests tell it). The
table: the step's limit, the pauses found and how they were seen, the longest one's length
against the truth, and its p99. The 0.3 and 1 s cases are also `tests/test_pauses.py`; the 5 s
case is here only (too long for CI).

Usage: .venv/bin/python benchmarks/pauses.py [--pauses 0.3 1 5] [--users 8 2] [--summary PATH]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from benchmarks.figures import print_table, write_summary
from lab.verdict.pauses import pauses_of
from tests.pausing_server import SERVICE_S, paused_record

HEADERS = ["server", "users", "pause", "limit", "pauses found", "seen", "longest", "p99", "also"]
FEW_USERS_SERVICE_S = 0.1  # at 2 users, about 2 answers per 100 ms: too few for the bins


def row(kind: str, users: int, pause_s: float, log_dir: Path) -> list[str]:
    service = SERVICE_S if users >= 8 else FEW_USERS_SERVICE_S
    window = pause_s + 2.5
    record = paused_record(kind, pause_s, 60.0, window, log_dir, service_s=service, users=users)
    found = pauses_of(record, service * 1000)
    longest = max((p.length_ms for p in found), default=0.0)
    return [
        kind,
        f"{users} x {service * 1000:g} ms",
        f"{pause_s:g} s",
        record.evidence.limited_by,
        str(len(found)),
        ", ".join(sorted({p.seen for p in found})) or "-",
        f"{longest:,.0f} ms",
        f"{record.latency.latency_ms.get('p99', 0.0):,.0f} ms",
        ", ".join(record.evidence.also_limited_by) or "-",
    ]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pauses", nargs="+", type=float, default=[0.3, 1.0, 5.0])
    p.add_argument("--users", nargs="+", type=int, default=[8, 2])
    p.add_argument("--summary", type=Path, help="write the table as a docs figure summary")
    args = p.parse_args()
    started = time.time()
    with tempfile.TemporaryDirectory() as logs:
        cases = [(k, u, s) for u in args.users for s in args.pauses for k in ("gevent", "threads")]
        body = [row(*case, Path(logs)) for case in cases]
    print_table("pauses named from the answers per 100 ms or the requests held", HEADERS, body)
    if args.summary:
        write_summary(args.summary, "pauses", HEADERS, body, "the script's table", started)


if __name__ == "__main__":
    main()
