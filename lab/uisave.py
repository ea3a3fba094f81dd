"""Saving a web-UI (or headless locust) run as a standard result directory that `lab report` reads.

Everything the UI writes goes through `save_run`, the one adapter onto the run-directory format
(`lab.results` today), so porting it to the core's record type touches this file only.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import lab
from lab import results
from lab.environment import capture
from lab.liveflags import Live, flags
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
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    run_dir = out / f"{stamp}-ui"
    suffix = 1
    while run_dir.exists():
        suffix += 1
        run_dir = out / f"{stamp}-ui-{suffix}"
    run_dir.mkdir(parents=True)
    results.write_json(run_dir / "manifest.json", _manifest(run_dir.name, segments, run))
    trials: dict[tuple[str, int], int] = {}
    for seg in segments:
        trial = trials[(seg.model, seg.users)] = trials.get((seg.model, seg.users), 0) + 1
        rel = results.hlog_relpath(seg.model, "closed", seg.users, trial)
        (run_dir / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(seg.hlog_path, run_dir / rel)
        step = _step(run_dir.name, seg, trial, rel, run.params)
        results.append_jsonl(run_dir / "steps.jsonl", step.to_json())
    return run_dir


def _mean(values: list[float]) -> float:
    return round(sum(values) / len(values), 1) if values else 0.0


def _step(run_id: str, seg: Segment, trial: int, rel: str, params: RunParams) -> results.Step:
    series = seg.timeseries
    rps = round(seg.ok / seg.duration_s, 2) if seg.duration_s else 0.0
    cpu = [v for v in series.get("server_cpu_pct", []) if v >= 0]
    client = _mean(series.get("client_cpu_pct", []))
    live = Live(
        seg.users,
        rps,
        seg.users / params.mean_delay_s if params.mean_delay_s else 0.0,
        _mean(cpu) if cpu else None,
        client,
    )
    evidence: dict[str, Any] = flags(live)
    if seg.errors:
        evidence["errors"] = dict(seg.errors)
    if not seg.ok:
        evidence["no_responses"] = "not one request succeeded"
    return results.Step(
        run_id=run_id,
        model=seg.model,
        mode="closed",
        concurrency=seg.users,
        trial=trial,
        started_at=seg.started_at,
        duration_s=seg.duration_s,
        requests=seg.requests,
        ok=seg.ok,
        errors=seg.errors,
        throughput_rps=rps,
        latency_ms=seg.latency_ms,
        server_cpu_pct=_mean(cpu),
        server_rss_mb=max(series.get("server_rss_mb", []), default=0.0),
        client_cpu_pct=client,
        upstream_max_inflight=int(max(series.get("upstream_inflight", []), default=-1)),
        flags=list(evidence),
        histogram=rel if seg.ok else "",
        timeseries=series,
        evidence=evidence,
    )


def _manifest(run_id: str, segments: list[Segment], run: UiRun) -> dict[str, Any]:
    """Shaped like lab/manifest.py's, so loading and reporting need no special case."""
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
