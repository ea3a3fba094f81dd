"""A committed run summary (`docs/figures/*.json`): written from a run directory, read back.

`summarize` keeps what the docs' figures need of a sweep, its provenance, one point per model and
level and what every claim reads of each step; `records` builds those steps back into step
records, so that the README's answer is the answer today's code gives from the committed
figures (`analysis.docfigures` renders them).
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from pathlib import Path
from typing import Any

from analysis.loading import load
from analysis.metrics import point_table
from lab.record.models import OWN_FRAMEWORK, app_framework, models_run_app
from lab.record.step import Measured, Raised, Sampled, StepKey, StepRecord, amended, step_record

ROOT = Path(__file__).resolve().parents[1]
Summary = dict[str, Any]


def digest(path: Path, root: Path = ROOT) -> str:
    return hashlib.sha256((root / path).read_bytes()).hexdigest()


def records(s: Summary) -> list[StepRecord]:
    """The committed run's steps as step records, with what every claim reads: throughput,
    answered requests, p99, flags and the per-second throughput (where it was kept)."""
    out = []
    for st in s["steps"]:
        measured = Measured(
            started_at=s["started_at"],
            duration_s=float(s["duration_s"]),
            requests=int(st["requests"]),
            ok=int(st["ok"]),
            latency_ms={"p50": st["p50_ms"], "p99": st["p99_ms"]},
            timeseries={"rps": st.get("seconds_rps", [])},
        )
        key = StepKey(st["model"], st["mode"], st["users"], st["rate_rps"], st["trial"])
        raised = tuple(Raised(f, {}) for f in st["flags"])
        record = step_record(s["run_id"], key, measured, Sampled(), raised)
        if "rps" in st:  # the step's own throughput (its measured window, not the nominal)
            record = amended(record, throughput_rps=float(st["rps"]))
        out.append(record)
    return out


def framework(s: Summary) -> str:
    """The framework of the summary's app (`lab.record.models.app_framework`). A summary written
    before runs recorded it (7 December 2026) is read in the words of its day, which its kept
    output holds: the lab then called every WSGI app by its own app's framework, Flask."""
    if "framework" in s:
        return str(s["framework"])
    return OWN_FRAMEWORK if s.get("kind", "wsgi") == "wsgi" else ""


def summarize(run_dir: Path, command: str, image: Path | None = None) -> Summary:
    """A sweep's summary: provenance and one point per model and level (trials combined)."""
    run = load(run_dir)
    m, tab = run.manifest, point_table(run)
    env = m.get("environment", {})
    started = datetime.fromisoformat(m["created_at"])
    finished = datetime.fromisoformat(m.get("finished_at") or m["created_at"])
    fields = ("rps", "efficiency", "p50_ms", "p99_ms", "server_cpu_pct", "client_cpu_pct")
    points = [
        {
            "model": r["model"],
            "users": int(r["concurrency"]),
            **{k: round(float(r[k]), 3) for k in fields},
            "flags": list(r["flags"]),
            "fair": bool(r["fair"]),  # no flag keeps it out of the verdict
        }
        for r in tab.to_dict("records")
    ]
    cpu = str(env.get("cpu_model", "?")).replace("(R)", "")
    return {
        "run_id": m["run_id"],
        "machine": f"{env.get('cpus', '?')} CPUs ({cpu}), Python {env.get('python', '?')}",
        "date": started.strftime("%-d %B %Y"),
        "command": command,
        "wall_s": round((finished - started).total_seconds()),
        "delay_ms": run.delay_ms,
        "duration_s": m["scenario"]["duration_s"],
        "models": list(m["scenario"]["models"]),
        "runs_app": models_run_app(m),
        "kind": (m["scenario"].get("app") or {}).get("kind", "wsgi"),
        "framework": app_framework(m),
        "started_at": m["created_at"],
        "steps": [_step(r) for r in run.records],
        "points": points,
        **({"image": str(image), "sha256": digest(image)} if image else {}),
    }


def _step(r: StepRecord) -> dict[str, Any]:
    """What the claims read of one step (`records` builds it back)."""
    return {
        "model": r.model,
        "mode": r.mode,
        "users": r.users,
        "rate_rps": r.rate_rps,
        "trial": r.trial,
        "requests": r.load.requests,
        "ok": r.load.ok,
        "rps": round(r.load.throughput_rps, 3),
        "p50_ms": r.latency.latency_ms.get("p50"),
        "p99_ms": r.latency.latency_ms.get("p99"),
        "flags": list(r.evidence.flags),
        "seconds_rps": [round(float(x), 2) for x in r.timeseries.get("rps", [])],
    }
