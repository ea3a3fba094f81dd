"""The run's record of itself: the manifest, built here and only here.

The manifest says everything a reader needs to trust or reproduce a run: environment, scenario,
knobs, exact server command lines. `--resume` continues a run only if the new invocation would
measure the same thing (`resumed_manifest`); the run directory skips every recorded step except
interrupted ones.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any

import lab
from lab.backends.base import Backend
from lab.config.models import Knobs, Model, canonical_knobs
from lab.front.nginx import behind
from lab.record.errors import LabError
from lab.record.step import SCHEMA_VERSION
from lab.run.plan import Plan
from lab.system.environment import capture

COMPARED_ON_RESUME = ("scenario", "knobs", "models")


def manifest(plan: Plan, backend: Backend, status: str) -> dict[str, Any]:
    s = plan.scenario
    environment = capture()
    return {
        "run_id": plan.run_id,
        "schema_version": SCHEMA_VERSION,
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
            **({"app": asdict(s.app)} if s.app else {}),
        },
        "knobs": vars(plan.knobs),
        "models": {m.name: model_entry(m, plan.knobs) for m in plan.models},
        "environment": {**environment, "nofile_applied": plan.limits},
        "lab_version": lab.__version__,
        "git_sha": environment["git_sha"],
        "allow_remote": plan.allow_remote,
        "generators": plan.generators.describe(),
        "invocation": plan.invocation,
    }


def model_entry(model: Model, knobs: Knobs) -> dict[str, Any]:
    """One model's entry in the manifest: what it is and the exact command line it ran with."""
    return {
        "description": model.description,
        "app": model.app,
        **({"bridge": model.bridge} if model.bridge else {}),
        "unit": model.unit,
        "baseline": model.baseline,
        "capacity": model.capacity(knobs),
        "argv": behind(model.command(knobs, "HOST", 0), "SOCKET")[0]
        if model.front
        else model.command(knobs, "HOST", 0),
        "env": dict(model.env),
        **({"front": model.front} if model.front else {}),
        **({"venv": model.venv} if model.venv else {}),  # the app's own environment
    }


def resumed_manifest(recorded: dict[str, Any], fresh: dict[str, Any]) -> dict[str, Any]:
    """The recorded manifest, continued, if the new invocation would measure the same thing.
    Knobs recorded under an old name (`workers`, before `concurrency`) compare as the new one."""
    knobs = canonical_knobs(recorded.get("knobs") or {}, "manifest.json: knobs")
    recorded = {**recorded, "knobs": knobs} if "knobs" in recorded else recorded
    fresh = json.loads(json.dumps(fresh, default=str))  # as recorded: lists, not tuples
    changed = [k for k in COMPARED_ON_RESUME if recorded.get(k) != fresh.get(k)]
    if changed:
        details = "; ".join(_first_difference(recorded.get(k), fresh.get(k), k) for k in changed)
        raise LabError(
            f"cannot resume {recorded.get('run_id')}: {', '.join(changed)} differ from the "
            f"recorded run ({details}). Resume with the same options and files, or start a new run."
        )
    return continued(recorded, fresh)


def continued(recorded: dict[str, Any], fresh: dict[str, Any]) -> dict[str, Any]:
    """The recorded manifest running again, with this resume noted."""
    resumes = [
        *recorded.get("resumes", []),
        {"at": fresh["created_at"], "git_sha": fresh["environment"]["git_sha"]},
    ]
    resumed = {k: v for k, v in recorded.items() if k not in ("interrupted_by", "error")}
    return {**resumed, "status": "running", "resumes": resumes, "finished_at": None}


def _first_difference(old: Any, new: Any, path: str) -> str:
    if isinstance(old, dict) and isinstance(new, dict):
        for key in sorted(set(old) | set(new), key=str):
            if old.get(key) != new.get(key):
                return _first_difference(old.get(key), new.get(key), f"{path}.{key}")
    was, now = (json.dumps(v, default=str)[:80] for v in (old, new))
    return f"{path} was {was}, now {now}"
