"""`granian-long-io`: the "Long I/O" table of Granian's benchmark page, reproduced and explained.

Granian's benchmarks/vs.md (run 5 August 2026, AMD Ryzen 7 5700X, 16 CPUs, Python 3.13, Granian
2.8.1) loads a route that waits 10 ms or 100 ms with oha at 512 connections, each server with one
worker, and lists RPS (oha's requestsPerSec) beside "Total requests" (200 answers). Each server
here is started with the harness's own argv (experiments/granian_long_io/cases.py) and loaded as
the harness loads it: a primer at 8 connections, a warm-up at the test's connections, then the
measured run, the same pauses between. Each row then says, from figures a client and `ps` can
see, what it measured: Little's law, the ceiling the configuration implies (one thread, one
process on one core, the ideal), the errors by kind, and why it differs from the page (the cores,
the client's own CPU). Then the same routes with each server as its docs recommend for such a
load, swept over connection levels, and the May 2025 uWSGI row (16,474 RPS at 100 ms), rebuilt.

The machine here is smaller (2 CPUs for the server and oha together, against 16): connections and
waits stay as published, `--quick` shortens every run (primer, warm-up and measured seconds).
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import psutil

from experiments.common import Reproduction, Row, RunDir, free_port, load_published, serving
from experiments.granian_long_io import cases as C
from experiments.granian_long_io import clients, may2025
from experiments.granian_long_io.gaps import PUBLISHED_S, Reading, errors_words, explain, verdict
from experiments.granian_long_io.tables import conclude, recommended_table
from lab.system.sampling import TreeMeter

SUMMARY = "Granian's Long I/O table (10/100 ms waits, 512 connections, oha), explained"
MODELS = {s.name: " ".join(s.argv) for s in C.PUBLISHED}
CPUS = psutil.cpu_count() or 1


Protocol = C.Protocol
PROTOCOLS = {
    "default": Protocol(),
    "quick": Protocol(
        bench_s=3.0, primer_s=1.0, warmup_s=1.0, pauses_s=(0.5, 0.5, 0.5), levels=(512,)
    ),
}


def all_cases(p: Protocol) -> tuple[C.Case, ...]:
    found = C.published_cases(p.connections)
    if p.recommended:
        found += C.recommended_cases(p.levels)
    if p.variants:
        found += C.variant_cases(p.connections)
    if p.may2025:
        found += (C.MAY_2025_CASE,)
    return tuple(c for c in found if not p.only or c.server.name in p.only)


def host_busy(before: Any, after: Any) -> float:
    """The machine's CPU between two psutil.cpu_times() readings, 100 per busy core."""
    idle = (after.idle + after.iowait) - (before.idle + before.iowait)
    total = sum(after) - sum(before)
    return round(100 * CPUS * (1 - idle / total), 1) if total > 0 else 0.0


def load(p: Protocol, run: RunDir, index: int, case: C.Case, url: str, pid: int) -> dict[str, Any]:
    """The harness's sequence against a started server: primer, warm-up, the measured run."""
    if case.warm:
        clients.run(url, p.primer_c, p.primer_s)
        time.sleep(p.pauses_s[0])
        clients.run(url, case.connections, p.warmup_s)
        time.sleep(p.pauses_s[1])
    meter, host0 = TreeMeter(pid), psutil.cpu_times()
    m = clients.run(url, case.connections, p.bench_s, raw=run.path / f"oha/case{index:02d}.json")
    server, host = meter.sample(), host_busy(host0, psutil.cpu_times())
    time.sleep(p.pauses_s[2])
    return {
        **m.to_dict(),
        "server_cpu_pct": server.cpu_pct,
        "server_rss_mb": server.rss_mb,
        "client_cpu_pct": round(100 * m.client_cpu_s / max(m.duration_s, 1e-9), 1),
        "host_cpu_pct": host,
    }


def measure(p: Protocol, run: RunDir, index: int, case: C.Case) -> dict[str, Any]:
    """One case: its server started with its argv, loaded, stopped; {"failed": why} when it could
    not be started or loaded."""
    port = free_port()
    argv = C.argv(case, port)
    out: dict[str, Any] = {"case": case.label, "kind": case.kind, "index": index, "argv": argv}
    out |= {"processes": C.processes(case.server), "threads": C.threads(case)}
    url = f"http://127.0.0.1:{port}{case.route}"
    log = run.path / f"logs/case{index:02d}.log"
    try:
        with serving(argv, f"http://127.0.0.1:{port}/health", log) as proc:
            out |= load(p, run, index, case, url, proc.pid)
    except Exception as e:  # a server that does not start, or a client that fails: the row says
        out["failed"] = f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"
    run.record(out)
    return out


def reading(m: dict[str, Any], case: C.Case) -> Reading:
    return Reading(
        connections=case.connections,
        sleep_s=case.sleep_s,
        rps=m["rps"],
        ok_rps=m["ok_rps"],
        avg_ms=m["avg_ms"],
        processes=m["processes"],
        threads=m["threads"],
        cores=CPUS,
        server_cpu_pct=m["server_cpu_pct"],
        client_cpu_pct=m["client_cpu_pct"],
        host_cpu_pct=m["host_cpu_pct"],
        errors=m["errors"],
        non_200=m["answered"] - m["ok"],
    )


METRICS = (
    ("RPS (oha requestsPerSec: errors counted)", "req/s", "rps"),
    ("answers 200 per second", "req/s", "ok_rps"),
    ("average latency", "ms", "avg_ms"),
)


def published_of(case: C.Case, pub: dict[str, Any]) -> dict[str, Any] | None:
    """The page's figures for the case, None for a row it does not have."""
    if case.kind != "published":
        return None
    figures: dict[str, Any] | None = pub.get(case.server.key, {}).get(f"{case.sleep_s * 1000:g}ms")
    return figures


def published_value(figures: dict[str, Any] | None, key: str) -> float | None:
    """One published figure; the 200-rate is "Total requests" over the 10 s run."""
    if figures is None:
        return None
    return shown(figures["total"] / PUBLISHED_S if key == "ok_rps" else figures[key])


def shown(x: float) -> float | int:
    """A figure as the table shows it: whole requests per second from 100 on, else one decimal."""
    return round(x) if abs(x) >= 100 else round(x, 1)


def latencies(m: dict[str, Any]) -> str:
    return f"p50 {m['p50_ms']:,.1f} ms, p99 {m['p99_ms']:,.1f} ms, slowest {m['max_ms']:,.1f} ms"


def rows(case: C.Case, m: dict[str, Any], pub: dict[str, Any]) -> list[Row]:
    """The case's rows, published beside measured where the page has the row."""
    section = case.label + (f" ({case.server.note})" if case.server.note else "")
    figures = published_of(case, pub)
    metrics = METRICS if figures is not None else METRICS[1:2]
    values = [(name, unit, published_value(figures, key), key) for name, unit, key in metrics]
    if "failed" in m:
        return [Row.of_failure(section, n, u, v, m["failed"]) for n, u, v, _ in values]
    r = reading(m, case)
    found = []
    notes = {"rps": errors_words(r), "ok_rps": verdict(r), "avg_ms": latencies(m)}
    for name, unit, published, key in values:
        value = shown(m[key]) if m["ok"] or key != "avg_ms" else None  # no answer, no latency
        row = Row(section, name, unit, published, value, notes[key], evidence=evidence(m))
        if row.gap() and figures is not None:
            row = replace(row, explanation=explain(figures, r, pub["cpus"]))
        found.append(row)
    return found


EVIDENCE = (
    *("argv", "status", "errors", "duration_s", "p50_ms", "p99_ms", "max_ms", "processes"),
    *("threads", "server_cpu_pct", "client_cpu_pct", "host_cpu_pct"),
)


def evidence(m: dict[str, Any]) -> dict[str, Any]:
    """What a row keeps to back its figures: the argv, the answers and errors, the CPUs."""
    return {k: m[k] for k in EVIDENCE if k in m}


def run(p: Protocol, run_dir: RunDir) -> Reproduction:
    published = load_published("granian_long_io")
    pub = {**published["figures"], "cpus": published["cpus"]}
    todo = all_cases(p)
    why = clients.missing()
    run_dir.manifest["oha"] = clients.version() if why is None else why
    run_dir.save_manifest()
    measured = []
    for i, case in enumerate(todo, 1):
        print(f"granian-long-io: [{i}/{len(todo)}] {case.kind}: {case.label}", flush=True)
        measured.append((case, {"failed": why} if why else measure(p, run_dir, i, case)))
    done = [(c, reading(m, c)) for c, m in measured if "failed" not in m]
    found = [row for c, m in measured if c.kind != "may2025" for row in rows(c, m, pub)]
    said = ""
    if p.may2025:
        oha_m = next(m for c, m in measured if c.kind == "may2025")
        may = reading(oha_m, C.MAY_2025_CASE) if "failed" not in oha_m else None
        rewrk_m = may2025.measure(p, run_dir, len(todo) + 1, C.MAY_2025_CASE)
        found += may2025.rows(C.MAY_2025_CASE, rewrk_m, may, pub)
        said = may2025.explanation(pub, rewrk_m, may)
    details = {"as each server's docs recommend": recommended_table(done)}
    return Reproduction(found, conclude(done) + (" " + said if said else ""), [], details)
