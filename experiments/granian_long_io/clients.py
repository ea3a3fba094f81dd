"""The harnesses' clients, run as they ran them: oha (the page of August 2026) and rewrk (May 2025).

`oha --no-tui -c C -z Ns --output-format json URL`: C connections for N seconds, each sending its
next request when the last one is answered (closed loop). The harness takes RPS from
`summary.requestsPerSec`, which counts every finished request, errors included (oha's own failures
such as a closed connection or a request cut off at the deadline), and its "Total requests" from
`statusCodeDistribution["200"]`. Both are kept here, with the errors by kind, so a figure that
counts errors is never read as a rate of answers.

The May 2025 page's harness ran `rewrk -c C -d Ns --json` with keep-alive headers and took RPS
from rewrk's `requests_avg` and "Total requests" from `requests_total`. rewrk 0.3 keeps the time of
every request it started, a failed one too (timed until it has reconnected), so both count
failures; it reports no status codes.
"""

from __future__ import annotations

import json
import resource
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lab.system import procs
from lab.system.tools import CARGO_BIN, binary, missing, version

__all__ = ["CARGO_BIN", "Load", "binary", "missing", "parse", "rewrk", "run", "version"]

# The May 2025 harness's headers: keep-alive asked for (its Keep-Alive value had a stray quote).
REWRK_HEADERS = ("Connection: Keep-Alive", "Keep-Alive: timeout=60'")


@dataclass(frozen=True)
class Load:
    """What one oha run measured, in the harness's terms and the lab's."""

    connections: int
    duration_s: float  # oha's own total time
    requests: int  # every finished request, errors included (what requestsPerSec counts)
    rps: float  # summary.requestsPerSec: the harness's "RPS"
    status: dict[str, int] = field(default_factory=dict)  # HTTP status -> answers
    errors: dict[str, int] = field(default_factory=dict)  # oha's error kinds -> count
    avg_ms: float = 0.0  # summary.average (answered requests)
    max_ms: float = 0.0  # summary.slowest
    p50_ms: float = 0.0
    p99_ms: float = 0.0
    client_cpu_s: float = 0.0  # oha's CPU seconds (user + system)

    @property
    def ok(self) -> int:
        return self.status.get("200", 0)

    @property
    def ok_rps(self) -> float:
        """The rate of 200 answers: the harness's "Total requests" over the run's time."""
        return self.ok / self.duration_s if self.duration_s else 0.0

    @property
    def answered(self) -> int:
        return sum(self.status.values())

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "ok": self.ok, "answered": self.answered, "ok_rps": self.ok_rps}


def parse(doc: dict[str, Any], connections: int, client_cpu_s: float = 0.0) -> Load:
    """oha's JSON (--output-format json) as a Load."""
    s, pct = doc["summary"], doc.get("latencyPercentiles") or {}
    status = {str(k): int(v) for k, v in (doc.get("statusCodeDistribution") or {}).items()}
    errors = {str(k): int(v) for k, v in (doc.get("errorDistribution") or {}).items()}
    ms = 1000.0
    return Load(
        connections=connections,
        duration_s=float(s.get("total") or 0.0),
        requests=sum(status.values()) + sum(errors.values()),
        rps=float(s.get("requestsPerSec") or 0.0),
        status=status,
        errors=errors,
        avg_ms=float(s.get("average") or 0.0) * ms,
        max_ms=float(s.get("slowest") or 0.0) * ms,
        p50_ms=float(pct.get("p50") or 0.0) * ms,
        p99_ms=float(pct.get("p99") or 0.0) * ms,
        client_cpu_s=round(client_cpu_s, 3),
    )


def run(url: str, connections: int, seconds: float, raw: Path | None = None) -> Load:
    """One oha run, as the harness's `wrk()` makes it; its JSON kept in `raw` when given. oha's
    CPU is what this process's waited-for children used meanwhile (only oha is waited for)."""
    exe = binary()
    if exe is None:
        raise RuntimeError(missing())
    argv = [exe, "--no-tui", "-c", str(connections), "-z", f"{seconds:g}s"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = procs.run_client([*argv, "--output-format", "json", url], seconds + 60)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if out.returncode != 0:
        raise RuntimeError(f"oha exited {out.returncode}: {out.stderr.strip()[-300:]}")
    if raw is not None:
        raw.parent.mkdir(parents=True, exist_ok=True)
        raw.write_text(out.stdout)
    return parse(json.loads(out.stdout), connections, cpu)


def rewrk(url: str, connections: int, seconds: float) -> dict[str, float]:
    """One rewrk run as the May 2025 harness made it: its RPS (requests_avg), requests_total and
    latencies (ms), every started request counted, failed ones too."""
    exe = binary("rewrk")
    if exe is None:
        raise RuntimeError(missing("rewrk"))
    argv = [exe, "-c", str(connections), "-d", f"{max(1, round(seconds))}s", "--json"]
    for header in REWRK_HEADERS:
        argv += ["-H", header]
    out = procs.run_client([*argv, "-h", url], seconds + 60)
    if out.returncode != 0:
        raise RuntimeError(f"rewrk exited {out.returncode}: {out.stderr.strip()[-300:]}")
    doc = json.loads(out.stdout)
    return {
        "rps": float(doc["requests_avg"] or 0.0),
        "requests": int(doc["requests_total"]),
        "avg_ms": float(doc["latency_avg"] or 0.0),
        "max_ms": float(doc["latency_max"] or 0.0),
    }
