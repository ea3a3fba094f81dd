"""Run the real ApacheBench (`ab`, apache2-utils) and read its report into abclient's result shape.

Why both: the published figures were taken with `ab`, and what a client does while the server's
listen queue drops its SYNs decides the time it prints. ab starts every connect at once, with no
bound of its own on a connect (its `-s` aborts the run only after that long without any socket
event), and it exits on the first receive error (no `-r` in the blog's command). The lab's client
(experiments/abclient.py) is kept as the default because it needs nothing installed and reports
errors by kind; a case can ask for `ab` to see whether the client is what makes the difference.
`lab_client` runs that client in a child, for every experiment that uses it.
"""

from __future__ import annotations

import re
import resource
import shutil
import subprocess
import time
from collections.abc import Sequence
from typing import Any

from experiments.common import run_child
from lab.system import procs
from lab.system.procs import pinned

LINE = re.compile(r"^\s*([A-Za-z0-9 %-]+?):\s+(.*)$")
PERCENT = re.compile(r"^\s*(\d+)%\s+(\d+)")


def tool_problem(argv: Sequence[str], expect: str = "") -> str | None:
    """Why a client tool cannot run here (one line), or None: it is run (e.g. `ab -V`) before an
    experiment starts, because a tool on PATH may still fail, e.g. to load its libraries."""
    shown = " ".join(argv)
    if shutil.which(argv[0]) is None:
        return f"{argv[0]} is not on PATH"
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"`{shown}` did not run: {e}"
    said = (done.stderr.strip() or done.stdout.strip()).splitlines()
    if done.returncode != 0:
        return f"`{shown}` exited {done.returncode}: {(said or ['no output'])[-1][:200]}"
    if expect not in done.stdout + done.stderr:
        return f"`{shown}` did not say {expect!r}: {(said or ['no output'])[-1][:200]}"
    return None


def missing() -> str | None:
    """Why `ab` cannot run here (one line), or None when it can: installed, and `ab -V` runs
    (an `ab` that cannot load its libraries is on PATH all the same)."""
    if not shutil.which("ab"):
        return "ApacheBench (ab) is not installed (apt: apache2-utils)"
    why = tool_problem(["ab", "-V"], expect="ApacheBench")
    return f"ApacheBench (ab) does not run: {why}" if why else None


def argv(url: str, n: int, c: int, timeout_s: float, deadline_s: float) -> list[str]:
    """The blog's `ab -c C -n N URL`, bounded: `-t` first (it would reset -n), `-s` as given."""
    return [
        "ab",
        "-t",
        f"{deadline_s:.0f}",
        "-n",
        str(n),
        "-c",
        str(c),
        "-s",
        f"{timeout_s:.0f}",
        url,
    ]


def run(
    url: str, n: int, c: int, timeout_s: float, deadline_s: float, cpus: Sequence[int] = ()
) -> dict[str, Any]:
    """Run ab once (pinned to `cpus`); its report, or why it aborted, as abclient's result."""
    started = time.time()
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = procs.run_client(pinned(argv(url, n, c, timeout_s, deadline_s), cpus), deadline_s + 30)
    elapsed = time.perf_counter() - t0
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    result = parse(proc.stdout, proc.stderr, n, c, started, elapsed)
    return {**result, "client_cpu_pct": 100 * cpu_s / elapsed if elapsed else 0.0}


def lab_client(
    url: str,
    n: int,
    c: int,
    timeout_s: float,
    deadline_s: float,
    cpus: Sequence[int] = (),
    *,
    connect_timeout_s: float | None = None,
    expect: str = "",
    hlog: str = "",
) -> dict[str, Any]:
    """Run the lab's own ab-style client (`experiments.abclient`) once in a child, pinned to
    `cpus` and killed 60 s past its deadline; its result has the shape of `run`'s. `expect`, the
    body every answer must carry; `hlog`, where it writes its HdrHistogram ("": none)."""
    args = [url, "-n", str(n), "-c", str(c), "--timeout", str(timeout_s)]
    args += ["--deadline", str(deadline_s)]
    args += ["--connect-timeout", str(connect_timeout_s)] if connect_timeout_s is not None else []
    args += ["--expect", expect] if expect else []
    args += ["--hlog", hlog] if hlog else []
    (result,) = run_child("experiments.abclient", args, deadline_s + 60, cpus or None)
    return result


def fields(report: str) -> dict[str, str]:
    """`Name:   value` lines of ab's report (the first of each name)."""
    found: dict[str, str] = {}
    for line in report.splitlines():
        if m := LINE.match(line):
            found.setdefault(m.group(1).strip(), m.group(2).strip())
    return found


def times_ms(row: str) -> dict[str, float]:
    """A "Connection Times (ms)" row: min, mean, [+/-sd], median, max."""
    lo, mean, _sd, median, hi = (float(x) for x in row.split()[:5])
    return {"min": lo, "mean": mean, "p50": median, "max": hi}


def parse(out: str, err: str, n: int, c: int, started: float, elapsed: float) -> dict[str, Any]:
    """abclient's result keys from ab's report. ab gives no 99.9th percentile: p999 is its max."""
    f = fields(out)
    if "Time taken for tests" not in f:
        reason = (err.strip().splitlines() or ["no report"])[-1]
        return empty(n, c, started, elapsed, reason)
    pct = {
        int(m.group(1)): float(m.group(2))
        for line in out.splitlines()
        if (m := PERCENT.match(line))
    }
    complete, failed = int(f["Complete requests"]), int(f["Failed requests"].split()[0])
    non2xx = int(f.get("Non-2xx responses", "0"))
    ok = complete - failed - non2xx
    total, connect = times_ms(f["Total"]), times_ms(f["Connect"])
    taken = float(f["Time taken for tests"].split()[0])
    return {
        **empty(n, c, started, taken, ""),
        "ok": ok,
        "errors": {k: v for k, v in (("ab_failed", failed), ("http_error", non2xx)) if v},
        "unfinished": n - complete,
        "deadline_hit": complete < n,
        "throughput_rps": ok / taken if taken else 0.0,
        "latency_ms": {
            "p50": pct[50],
            "p90": pct[90],
            "p99": pct[99],
            "p999": pct[100],
            "max": pct[100],
            "mean": total["mean"],
        },
        "connect_ms": connect,
    }


def empty(n: int, c: int, started: float, elapsed: float, aborted: str) -> dict[str, Any]:
    """A result with nothing finished; `aborted` is ab's last error line, "" when it did not."""
    zeros = {k: 0.0 for k in ("p50", "p90", "p99", "p999", "max", "mean")}
    return {
        "n": n,
        "c": c,
        "started_at": started,
        "time_taken_s": elapsed,
        "deadline_hit": True,
        "ok": 0,
        "errors": {"ab_aborted": 1} if aborted else {},
        "error_details": {},
        "unfinished": n,
        "throughput_rps": 0.0,
        "latency_ms": zeros,
        "connect_ms": zeros,
        "client_cpu_pct": 0.0,
        "client": "ab",
        "ab_aborted": aborted,
    }
