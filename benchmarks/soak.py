"""Soak benchmark (not a test): does the lab itself leak over a long step at high concurrency?

Runs the real `lab run` (one model, one level of 1,000 closed-loop connections, 10 minutes by
default) and samples, every few seconds, the resident memory and open file descriptors of the lab
process and of its load generator (the lab's own parts), plus the server and upstream for context.
It then reports the figures over time, a leak verdict (growth over the second half of the run,
where start-up is over), and the step's requests and errors.

Usage: .venv/bin/python benchmarks/soak.py [--model gunicorn-gevent] [--connections 1000]
       [--minutes 10] [--delay-ms 100] [--sample-s 5] [--out results/soak]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import psutil
from rich.console import Console
from rich.table import Table

from lab.record.rundir import RunDir, write_json
from lab.system import procs

MB = 1024 * 1024
ROLES = ("lab", "loadgen", "server", "upstream")
RSS_GROWTH_MB_PER_MIN = 1.0  # more than this over the second half counts as a leak
FD_GROWTH = 16  # more descriptors than this at the end than at mid-run counts as a leak


@dataclass(frozen=True)
class Sample:
    t: float  # seconds since the soak started
    wall: float  # epoch seconds, to keep only samples inside the step's measured window
    role: str
    rss_mb: float
    fds: int
    processes: int


def tree(pid: int, children: bool) -> list[psutil.Process]:
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)] if children else [root]
    except psutil.Error:
        return []


def measure(t: float, role: str, pid: int) -> Sample | None:
    """RSS and descriptors of one role: the lab process alone, the others with their workers."""
    rss, fds, alive = 0, 0, 0
    for proc in tree(pid, children=role != "lab"):
        try:
            rss += proc.memory_info().rss
            fds += proc.num_fds()
            alive += 1
        except psutil.Error:
            continue
    return Sample(t, time.time(), role, round(rss / MB, 1), fds, alive) if alive else None


def role_pids(lab_pid: int, run_dir: Path | None, model: str) -> dict[str, int]:
    pids = {"lab": lab_pid}
    if run_dir is not None:
        for role, name in (("loadgen", "loadgen"), ("server", model), ("upstream", "upstream")):
            record = procs.PidRecord.read(run_dir / "pids" / f"{name}.pid")
            if record is not None and record.is_running():
                pids[role] = record.pid
    return pids


def slope_per_min(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, value) points, per minute."""
    if len(points) < 2:
        return 0.0
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    var = sum((x - mx) ** 2 for x, _ in points)
    return 0.0 if var == 0 else 60 * sum((x - mx) * (y - my) for x, y in points) / var


def summarise(samples: list[Sample], role: str) -> dict[str, float] | None:
    rows = [s for s in samples if s.role == role]
    if not rows:
        return None
    half = (rows[0].t + rows[-1].t) / 2
    steady = [s for s in rows if s.t >= half]  # second half: start-up is over
    return {
        "rss_mb_first": rows[0].rss_mb,
        "rss_mb_mid": steady[0].rss_mb,
        "rss_mb_last": rows[-1].rss_mb,
        "rss_mb_max": max(s.rss_mb for s in rows),
        "rss_mb_per_min_2nd_half": round(slope_per_min([(s.t, s.rss_mb) for s in steady]), 3),
        "fds_first": rows[0].fds,
        "fds_mid": steady[0].fds,
        "fds_last": rows[-1].fds,
        "fds_max": max(s.fds for s in rows),
        "samples": len(rows),
    }


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--model", default="gunicorn-gevent")
    parser.add_argument("--connections", type=int, default=1000)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--delay-ms", type=float, default=100.0)
    parser.add_argument("--sample-s", type=float, default=5.0)
    parser.add_argument("--out", type=Path, default=Path("results/soak"))
    return parser.parse_args()


def lab_argv(args: argparse.Namespace) -> list[str]:
    return [
        *[sys.executable, "-c", "from lab.cli.main import entry; entry()", "run"],
        *["--models", args.model, "--levels", str(args.connections)],
        *["--duration", str(args.minutes * 60), "--warmup", "0"],
        *["--delay-ms", str(args.delay_ms), "--out", str(args.out)],
    ]


def follow(
    lab: subprocess.Popen[bytes], args: argparse.Namespace, before: set[str], console: Console
) -> tuple[list[Sample], Path | None]:
    """Sample every role until the lab exits; the samples and the run directory it made."""
    samples: list[Sample] = []
    start = time.monotonic()
    run_dir: Path | None = None
    while lab.poll() is None:
        if run_dir is None:
            new = [p for p in args.out.iterdir() if p.is_dir() and p.name not in before]
            run_dir = new[0] if new else None
        t = round(time.monotonic() - start, 1)
        pids = role_pids(lab.pid, run_dir, args.model)
        if "loadgen" not in pids:  # only the measured step counts: not start-up or the report
            time.sleep(0.5)
            continue
        now = [x for role, pid in pids.items() if (x := measure(t, role, pid)) is not None]
        samples.extend(now)
        figures = "  ".join(f"{r.role} {r.rss_mb} MB/{r.fds} fds" for r in now)
        console.print(f"  t={t:>6.0f}s  {figures}")
        time.sleep(args.sample_s)
    return samples, run_dir


STEP_FIELDS = (
    "requests",
    "ok",
    "errors",
    "throughput_rps",
    "latency_ms",
    "client_cpu_pct",
    "server_cpu_pct",
    "upstream_max_inflight",
    "flags",
    "duration_s",
)


def build_report(
    args: argparse.Namespace, lab_exit: int, run_dir: Path, samples: list[Sample]
) -> dict[str, Any]:
    steps = [vars(r) for r in RunDir(run_dir).steps()]
    step = steps[-1] if steps else {}
    if step:  # settle and shutdown are not the soak: keep the measured window only
        begin = datetime.fromisoformat(step["started_at"]).timestamp()
        samples = [x for x in samples if begin <= x.wall <= begin + step["duration_s"]]
    report: dict[str, Any] = {
        "model": args.model,
        "connections": args.connections,
        "minutes": args.minutes,
        "lab_exit_code": lab_exit,
        "run_dir": str(run_dir),
        "step": {k: step.get(k) for k in STEP_FIELDS},
        "roles": {role: summarise(samples, role) for role in ROLES},
        "timeseries": [vars(s) for s in samples],
    }
    report["leaks"] = leaks(report["roles"])
    return report


def leaks(roles: dict[str, dict[str, float] | None]) -> list[str]:
    """The lab's own parts whose memory or descriptors grew over the second half."""
    found = []
    for role in ("lab", "loadgen"):
        fig = roles[role]
        if fig and fig["rss_mb_per_min_2nd_half"] > RSS_GROWTH_MB_PER_MIN:
            found.append(f"{role} RSS grows {fig['rss_mb_per_min_2nd_half']} MB/min")
        if fig and fig["fds_last"] - fig["fds_mid"] > FD_GROWTH:
            found.append(f"{role} open files {fig['fds_mid']} -> {fig['fds_last']}")
    return found


def print_report(console: Console, args: argparse.Namespace, report: dict[str, Any]) -> None:
    table = Table(title=f"soak: {args.model}, {args.connections} connections, {args.minutes} min")
    for column in (
        "process",
        "RSS first/mid/last/max MB",
        "RSS MB/min (2nd half)",
        "fds first/mid/last/max",
    ):
        table.add_column(column)
    for role in ROLES:
        fig = report["roles"][role]
        if fig:
            table.add_row(
                role,
                f"{fig['rss_mb_first']}/{fig['rss_mb_mid']}/{fig['rss_mb_last']}/{fig['rss_mb_max']}",
                str(fig["rss_mb_per_min_2nd_half"]),
                f"{fig['fds_first']}/{fig['fds_mid']}/{fig['fds_last']}/{fig['fds_max']}",
            )
    console.print(table)
    s = report["step"]
    lat = s["latency_ms"] or {}
    console.print(
        f"step: {s['requests']} requests, {s['ok']} ok, errors {s['errors']}, "
        f"{s['throughput_rps']} rps, p50 {lat.get('p50')} ms, p99 {lat.get('p99')} ms, "
        f"client CPU {s['client_cpu_pct']}%, upstream max in flight {s['upstream_max_inflight']}, "
        f"flags {s['flags']}"
    )
    found = ", ".join(report["leaks"]) or "none"
    console.print(f"leaks: {found}   (full series: {args.out / 'soak.json'})")


def main() -> None:
    args = parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    before = {p.name for p in args.out.iterdir()}
    console = Console()
    console.print(f"soak: {args.model}, {args.connections} connections, {args.minutes} min")
    with (args.out / "soak-lab-output.txt").open("w") as log:
        lab = subprocess.Popen(lab_argv(args), stdout=log, stderr=subprocess.STDOUT)
        samples, run_dir = follow(lab, args, before, console)
    if run_dir is None:
        raise SystemExit(f"lab exited ({lab.returncode}) before creating a run directory")
    report = build_report(args, lab.returncode, run_dir, samples)
    write_json(args.out / "soak.json", report)
    print_report(console, args, report)
    failed = report["leaks"] or lab.returncode or (report["step"]["errors"] or {})
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
