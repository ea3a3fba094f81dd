"""The run's record of itself: the manifest, and what `--resume` needs from a run directory.

The manifest says everything a reader needs to trust or reproduce a run: environment, scenario,
knobs, exact server command lines. `--resume` continues a run only if the new invocation would
measure the same thing, and skips every recorded step except interrupted ones.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import lab
from lab import results
from lab.backend import Backend
from lab.environment import capture
from lab.errors import LabError

if TYPE_CHECKING:
    from lab.sweep import Plan

COMPARED_ON_RESUME = ("scenario", "knobs", "models")


def new_run_dir(out: Path, scenario_name: str) -> Path:
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    run_dir = out / f"{stamp}-{scenario_name}"
    suffix = 1
    while run_dir.exists():
        suffix += 1
        run_dir = out / f"{stamp}-{scenario_name}-{suffix}"
    run_dir.mkdir(parents=True)
    return run_dir


def manifest(plan: Plan, backend: Backend, status: str) -> dict[str, Any]:
    s = plan.scenario
    environment = capture()
    return {
        "run_id": plan.run_id,
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "status": status,
        "backend": backend.name,
        "execution": backend.describe(),
        "scenario": {
            "name": s.name,
            "description": s.description,
            "mode": s.mode,
            "levels": list(s.levels),
            "rates": list(s.rates),
            "max_outstanding": s.max_outstanding,
            "arrival": s.arrival,
            "duration_s": s.duration_s,
            "warmup_s": s.warmup_s,
            "settle_s": s.settle_s,
            "trials": s.trials,
            "route": s.route,
            "path": s.path(),
            "delay_ms": s.delay_ms,
            "distribution": s.upstream.distribution,
            "upstream": vars(s.upstream),
            "models": [m.name for m in plan.models],
            "request_timeout_s": s.request_timeout_s,
            "probe_k": s.probe_k,
        },  # fmt: skip
        "knobs": vars(plan.knobs),
        "models": {
            m.name: {
                "description": m.description,
                "app": m.app,
                "unit": m.unit,
                "baseline": m.baseline,
                "capacity": m.capacity(plan.knobs),
                "argv": m.command(plan.knobs, "HOST", 0),
                "env": dict(m.env),
            }
            for m in plan.models
        },  # fmt: skip
        "environment": {**environment, "nofile_applied": plan.limits},
        "lab_version": lab.__version__,
        "git_sha": environment["git_sha"],
        "allow_remote": plan.allow_remote,
        "invocation": plan.invocation,
    }


StepKey = tuple[str, str, int, float | None, int]


def step_key(step: dict[str, Any]) -> StepKey:
    """What identifies a step: model, mode, users (or cap), rate (open loop) and trial."""
    return step["model"], step["mode"], step["concurrency"], step.get("rate_rps"), step["trial"]


def completed_steps(run_dir: Path) -> set[StepKey]:
    """Steps already recorded in steps.jsonl; an interrupted one is measured again."""
    rows = results.read_jsonl(run_dir / "steps.jsonl")
    return {step_key(r) for r in rows if "interrupted" not in r.get("flags", [])}


def resumed_manifest(recorded: dict[str, Any], fresh: dict[str, Any]) -> dict[str, Any]:
    """The recorded manifest, continued, if the new invocation would measure the same thing."""
    changed = [k for k in COMPARED_ON_RESUME if recorded.get(k) != fresh.get(k)]
    if changed:
        details = "; ".join(_first_difference(recorded.get(k), fresh.get(k), k) for k in changed)
        raise LabError(
            f"cannot resume {recorded.get('run_id')}: {', '.join(changed)} differ from the "
            f"recorded run ({details}). Resume with the same options and files, or start a new run."
        )
    resumes = [*recorded.get("resumes", []),
               {"at": fresh["created_at"], "git_sha": fresh["environment"]["git_sha"]}]  # fmt: skip
    return {**recorded, "status": "running", "resumes": resumes, "finished_at": None}


def _first_difference(old: Any, new: Any, path: str) -> str:
    if isinstance(old, dict) and isinstance(new, dict):
        for key in sorted(set(old) | set(new), key=str):
            if old.get(key) != new.get(key):
                return _first_difference(old.get(key), new.get(key), f"{path}.{key}")
    was, now = (json.dumps(v, default=str)[:80] for v in (old, new))
    return f"{path} was {was}, now {now}"
