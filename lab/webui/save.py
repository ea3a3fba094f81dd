"""Saving a web-UI (or headless locust) run as a standard result directory that `lab report` reads.

Everything the UI writes goes through `save_run`: the run directory (`lab.record.rundir`) and step
records
(`lab.record.step.step_record`) are the same a sweep writes, so `lab report` needs no special case.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import lab
from lab.record.rundir import RunDir
from lab.record.step import Raised, Sampled, StepKey, StepRecord, step_record
from lab.run.generator import measured_of
from lab.system.environment import capture
from lab.webui.liveflags import SERVER_CORES_ENV, Live, flags
from loadgen.live import Segment
from loadgen.runparams import RunParams


@dataclass(frozen=True)
class UiRun:
    """What the manifest says about a UI run besides its steps."""

    params: RunParams
    path: str  # an example request path, e.g. /io?delay_ms=100
    backend: str  # "native" (lab ui) or "compose"
    invocation: list[str]


def save_run(out: Path, segments: list[Segment], run: UiRun) -> Path:
    """Write manifest.json, steps.jsonl and histograms/ for these segments under `out`."""
    run_dir = RunDir.create(out, "ui")
    run_dir.write_manifest(_manifest(run_dir.run_id, segments, run))
    trials: dict[tuple[str, int], int] = {}
    for seg in segments:
        trial = trials[(seg.model, seg.users)] = trials.get((seg.model, seg.users), 0) + 1
        key = StepKey(seg.model, "closed", seg.users, None, trial)
        rel = RunDir.hlog_relpath(key)
        (run_dir.path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(seg.hlog_path, run_dir.path / rel)
        run_dir.append_step(_step(run_dir.run_id, seg, key, rel, run.params))
    return run_dir.path


def _mean(values: list[float]) -> float:
    return round(sum(values) / len(values), 1) if values else 0.0


def _measured(series: Mapping[str, list[float]], name: str) -> list[float]:
    """A series' measured seconds (-1: nothing measured that second)."""
    return [v for v in series.get(name, []) if v >= 0]


def _step(run_id: str, seg: Segment, key: StepKey, rel: str, params: RunParams) -> StepRecord:
    series = seg.timeseries
    cpu = _measured(series, "server_cpu_pct")
    client = _mean(series.get("client_cpu_pct", []))
    measured = measured_of(seg, client, series)
    sampled = Sampled(
        server_cpu_pct=_mean(cpu),
        server_rss_mb=max(series.get("server_rss_mb", []), default=0.0),
        server_pss_mb=max(series.get("server_pss_mb", []), default=0.0),
        upstream_max_inflight=int(max(series.get("upstream_inflight", []), default=-1)),
        front_cpu_pct=_mean(front) if (front := _measured(series, "front_cpu_pct")) else -1.0,
        front_rss_mb=max(series.get("front_rss_mb", []), default=-1.0),
    )
    rps = round(seg.ok / seg.duration_s, 2) if seg.duration_s else 0.0
    ideal = seg.users / params.mean_delay_s if params.mean_delay_s else 0.0
    cores = float(os.environ.get(SERVER_CORES_ENV) or 1.0)
    p50 = seg.latency_ms.get("p50")
    failed_per_s = sum(seg.errors.values()) / seg.duration_s if seg.duration_s else 0.0
    live = Live(
        seg.users, rps, ideal, _mean(cpu) if cpu else None, client, cores, p50, failed_per_s
    )
    raised = tuple(Raised(name, why) for name, why in flags(live).items())
    return step_record(run_id, key, measured, sampled, raised, histogram=rel)


def _manifest(run_id: str, segments: list[Segment], run: UiRun) -> dict[str, Any]:
    """Shaped like lab/run/manifest.py's, so loading and reporting need no special case."""
    p = run.params
    models = sorted({s.model for s in segments})
    environment = capture()
    return {
        "run_id": run_id,
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "status": "finished",
        "backend": run.backend,
        "execution": {"backend": run.backend},
        "scenario": {
            "name": "ui",
            "description": "locust web UI run (each settled user count is a step)",
            "mode": "closed",
            "levels": sorted({s.users for s in segments}),
            "rates": [],
            "max_outstanding": None,
            "arrival": "constant",
            "duration_s": max((s.duration_s for s in segments), default=0.0),
            "warmup_s": 0.0,
            "settle_s": 0.0,
            "trials": 1,
            "route": p.route,
            "path": run.path,
            "delay_ms": p.delay_ms,
            "distribution": p.distribution,
            "upstream": {"delay_ms": p.delay_ms, "distribution": p.distribution},
            "models": models,
            "request_timeout_s": 120.0,
            "probe_k": 0,
        },
        "knobs": {},
        "models": {m: {"description": m} for m in models},
        "environment": environment,
        "lab_version": lab.__version__,
        "git_sha": environment["git_sha"],
        "allow_remote": False,
        "invocation": run.invocation,
    }
