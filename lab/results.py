"""The run directory: what a run writes, written so that nothing finished is ever lost.

Layout of `results/<run-id>/`:

- `manifest.json`   environment, scenario, models with exact command lines and knobs (atomic writes)
- `preflight.jsonl` one object per model: verification and concurrency-probe evidence
- `steps.jsonl`     one object per completed step, appended, flushed and fsynced as each step ends
- `histograms/<model>/<mode>-c<concurrency>-t<trial>.hlog`  per-second latency histograms (µs)
- `logs/<model>.log` the server's own output
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

STEP_FLAGS = (
    "serialized",  # the concurrency probe found requests did not overlap: not a fair result
    "client_saturated",  # the load generator's CPU was >= 90%: throughput is the client's limit
    "host_busy",  # processes outside the run used >= half a core: the figures are disturbed
    "errors",  # at least one request failed
    "no_responses",  # not one request succeeded
    "server_died",  # the server process exited during the step
    "server_hung",  # the server was alive but did not answer /health after the step
    "upstream_down",  # the upstream exited or stalled: the errors are its, not the model's
    "loadgen_failed",  # the load generator exited without a result
    "start_failed",  # the server exited or never answered /health; nothing measured
    "preflight_failed",  # the server answered wrongly before any load; nothing measured
    "interrupted",  # Ctrl-C/SIGTERM cut the step short; `--resume` measures it again
)
# `dropped` is open loop only: a request due while the cap on outstanding requests was full.
ERROR_KINDS = (
    "refused", "reset", "timeout", "http_5xx", "http_4xx", "bad_body", "other", "dropped",
)  # fmt: skip


@dataclass
class Step:
    """One measured step: one model at one concurrency level (or rate) for one trial."""

    run_id: str
    model: str
    mode: str  # "closed" (N users, no think time) or "open" (constant arrival rate)
    concurrency: int  # closed: users; open: the cap on outstanding requests
    trial: int
    started_at: str  # ISO 8601 UTC, start of the measured window
    duration_s: float  # measured window, warm-up and settle excluded
    requests: int
    ok: int
    errors: dict[str, int]  # kind -> count, kinds from ERROR_KINDS
    throughput_rps: float  # ok responses per second of the measured window
    latency_ms: dict[str, float]  # p50, p90, p99, p999, max, mean of successful requests
    server_cpu_pct: float  # mean over the window, whole process tree, 100 = one core
    server_rss_mb: float  # peak over the window, whole process tree
    client_cpu_pct: float  # mean over the window, the load generator process, 100 = one core
    upstream_max_inflight: int  # highest concurrency the upstream saw during the window
    flags: list[str] = field(default_factory=list)
    upstream_cpu_pct: float = 0.0  # mean over the window: proof the upstream was not the limit
    host_cpu_pct: float = 0.0  # whole machine, mean over the window, 100 = one core
    rate_rps: float | None = None  # open loop: the target arrival rate
    histogram: str = ""  # path of the `.hlog`, relative to the run directory
    timeseries: dict[str, list[float]] = field(default_factory=dict)  # per-second samples
    evidence: dict[str, Any] = field(default_factory=dict)  # why a flag was raised

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


def hlog_relpath(model: str, mode: str, concurrency: int, trial: int,
                 rate_rps: float | None = None) -> str:  # fmt: skip
    point = f"r{rate_rps:g}" if rate_rps is not None else f"c{concurrency}"
    return f"histograms/{model}/{mode}-{point}-t{trial}.hlog"


def append_jsonl(path: Path, obj: dict[str, Any] | str) -> None:
    """Append one JSON line and fsync, so a crash right after loses nothing already written."""
    line = obj if isinstance(obj, str) else json.dumps(obj, sort_keys=True)
    with open(path, "a") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Read JSON lines, tolerating a truncated last line left by a crash mid-write."""
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def write_atomic(path: Path, text: str) -> None:
    """Write a whole file atomically: temp file in the same directory, fsync, rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json(path: Path, obj: Any) -> None:
    write_atomic(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")
