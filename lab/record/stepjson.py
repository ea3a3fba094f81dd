"""Reading a step back: every schema the lab ever wrote into a `StepRecord`, types checked.

Apart from `lab.record.step` (which builds records from measurements) so that each stays
readable in one sitting; `lab.record.rundir` reads `steps.jsonl` through `from_json`.
"""

from __future__ import annotations

from dataclasses import MISSING, fields
from typing import Any

from lab.record.errors import LabError
from lab.record.step import READABLE_SCHEMAS, StepRecord


def from_json(data: Any) -> StepRecord:
    """A record from one parsed line of `steps.jsonl`, of any schema this lab can read."""
    if not isinstance(data, dict):
        raise LabError(f"a step must be a JSON object, got {type(data).__name__}")
    version = data.get("schema_version", 1)
    if version not in READABLE_SCHEMAS:
        raise LabError(
            f"step schema {version!r} is not one this lab reads ({READABLE_SCHEMAS}); "
            "a newer lab wrote it"
        )
    if version == 1:
        data = _from_schema_1(data)
    names = {f.name for f in fields(StepRecord)}
    required = {
        f.name for f in fields(StepRecord) if f.default is MISSING and f.default_factory is MISSING
    }
    missing = sorted(n for n in required if n not in data)
    if missing:
        raise LabError(f"a step lacks {', '.join(missing)}")
    values = {k: v for k, v in data.items() if k in names}
    values["flags"] = tuple(values["flags"])
    for name in ("latency_lower_bounds", "latency_all_lower_bounds", "also_limited_by"):
        values[name] = tuple(values.get(name) or ())
    for name in ("unanswered_hides", "generator_moved", "answers_100ms"):
        values[name] = tuple(values.get(name) or ())
    values["answers_by_latency"] = tuple((e, n) for e, n in values.get("answers_by_latency") or ())
    record = StepRecord(**values)
    _check_types(record)
    return record


def _from_schema_1(old: dict[str, Any]) -> dict[str, Any]:
    """Schema 1 had `concurrency` (users, or the open-loop cap) and no status."""
    data = dict(old)
    concurrency = data.pop("concurrency", None)
    is_open = data.get("mode") == "open"
    data.setdefault("users", None if is_open else concurrency)
    data.setdefault("max_outstanding", concurrency if is_open else None)
    data.setdefault("rate_rps", None)
    data.setdefault("upstream_cpu_pct", 0.0)
    data.setdefault("host_cpu_pct", 0.0)
    data.setdefault("histogram", "")
    data.setdefault("timeseries", {})
    data.setdefault("evidence", {})
    flags = data.get("flags") or []
    unmeasured = {"start_failed", "preflight_failed"} & set(flags)
    data.setdefault(
        "status", "partial" if "interrupted" in flags else "skipped" if unmeasured else "measured"
    )
    data["schema_version"] = 1
    return data


_TYPES: dict[str, type | tuple[type, ...]] = {
    "run_id": str,
    "model": str,
    "mode": str,
    "trial": int,
    "status": str,
    "started_at": str,
    "duration_s": (int, float),
    "requests": int,
    "ok": int,
    "errors": dict,
    "throughput_rps": (int, float),
    "latency_ms": dict,
    "flags": tuple,
    "histogram": str,
    "timeseries": dict,
    "evidence": dict,
}


def _check_types(record: StepRecord) -> None:
    for name, kind in _TYPES.items():
        value = getattr(record, name)
        if not isinstance(value, kind) or isinstance(value, bool):
            raise LabError(f"a step's {name} has the wrong type ({type(value).__name__})")
    if record.mode not in ("closed", "open"):
        raise LabError(f"a step's mode must be closed or open, got {record.mode!r}")
