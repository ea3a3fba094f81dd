"""Reading a step back: every schema the lab ever wrote into a `StepRecord`, types checked.

Apart from `lab.record.step` (which builds records from measurements) so that each stays
readable in one sitting; `lab.record.rundir` reads `steps.jsonl` through `from_json`. Every
schema is read through its flat form (each figure under its own name, as schema 2 wrote it) and
sorted into the parts by `lab.record.step.nested`, so one list of names decides both.
"""

from __future__ import annotations

from dataclasses import MISSING, fields
from typing import Any

from lab.record.errors import LabError
from lab.record.step import READABLE_SCHEMAS, StepRecord, nested
from lab.record.stepparts import PARTS

_TUPLES = (
    "flags",
    "latency_lower_bounds",
    "latency_all_lower_bounds",
    "also_limited_by",
    "unanswered_hides",
    "generator_moved",
    "answers_100ms",
)


def from_json(data: Any) -> StepRecord:
    """A record from one parsed line of `steps.jsonl`, of any schema this lab can read."""
    if not isinstance(data, dict):
        raise LabError(f"a step must be a JSON object, got {type(data).__name__}")
    version = data.get("schema_version", 1)
    if version not in READABLE_SCHEMAS:
        raise LabError(
            f"step schema {version!r} is not one this lab reads ({READABLE_SCHEMAS}); a newer lab "
            "wrote it"
        )
    values = _flattened(data) if version == 3 else _from_schema_2(data, version)
    missing = sorted(n for n in _REQUIRED if n not in values)
    if missing:
        raise LabError(f"a step lacks {', '.join(missing)}")
    values = {k: v for k, v in values.items() if k in _NAMES}
    for name in _TUPLES:
        values[name] = tuple(values.get(name) or ())
    values["answers_by_latency"] = tuple((e, n) for e, n in values.get("answers_by_latency") or ())
    _check_types(values)
    return StepRecord(**nested(values))


def _flattened(data: dict[str, Any]) -> dict[str, Any]:
    """A schema-3 line's fields, each part's figures beside the key."""
    values = {k: v for k, v in data.items() if k not in PARTS}
    for name in PARTS:
        part = data.get(name)
        if not isinstance(part, dict):
            raise LabError(f"a step's {name} must be a JSON object, got {type(part).__name__}")
        values |= part
    return values


def _from_schema_2(old: dict[str, Any], version: int) -> dict[str, Any]:
    """Schema 2 kept every figure flat, the flags' details as `evidence`; schema 1 also had
    `concurrency` (users, or the open-loop cap) and no status."""
    data = dict(old)
    data["details"] = data.pop("evidence", {})
    if version == 1:
        _from_schema_1(data)
    data["schema_version"] = version
    return data


def _from_schema_1(data: dict[str, Any]) -> None:
    concurrency = data.pop("concurrency", None)
    is_open = data.get("mode") == "open"
    data.setdefault("users", None if is_open else concurrency)
    data.setdefault("max_outstanding", concurrency if is_open else None)
    data.setdefault("rate_rps", None)
    data.setdefault("upstream_cpu_pct", 0.0)
    data.setdefault("host_cpu_pct", 0.0)
    data.setdefault("histogram", "")
    data.setdefault("timeseries", {})
    flags = data.get("flags") or []
    unmeasured = {"start_failed", "preflight_failed"} & set(flags)
    data.setdefault(
        "status", "partial" if "interrupted" in flags else "skipped" if unmeasured else "measured"
    )


def _required(kind: type) -> set[str]:
    return {f.name for f in fields(kind) if f.default is MISSING and f.default_factory is MISSING}


_NAMES = {f.name for f in fields(StepRecord)} - set(PARTS) | {
    f.name for part in PARTS.values() for f in fields(part)
}
_REQUIRED = (_required(StepRecord) - set(PARTS)).union(*(_required(p) for p in PARTS.values()))

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
    "details": dict,
}


def _check_types(values: dict[str, Any]) -> None:
    for name, kind in _TYPES.items():
        value = values[name]
        if not isinstance(value, kind) or isinstance(value, bool):
            raise LabError(f"a step's {name} has the wrong type ({type(value).__name__})")
    if values["mode"] not in ("closed", "open"):
        raise LabError(f"a step's mode must be closed or open, got {values['mode']!r}")
