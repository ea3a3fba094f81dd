"""The step record: what one model measured at one point of a sweep, built in one place.

`step_record` is the only constructor of a `StepRecord` from measurements: sweeps, interrupted
steps, models that could not start, experiments and test fixtures all go through it, so a field
added here reaches every writer at once. `lab.record.stepjson.from_json` reads every schema the lab
ever wrote.

Schema 3 (7 December 2026) groups a step's figures into four parts under the step's key and
window (`lab.record.stepparts`: `load`, `latency`, `resources`, `evidence`); the flags' details,
a flat `evidence` before, are `evidence.details`. Schema 2 kept every figure flat and named what
a step's load was: `users` in closed loop, `rate_rps` and `max_outstanding` in open loop. Schema 1
(before 2026-11) had one `concurrency` field meaning users in closed loop and the cap on
outstanding requests in open loop. Both are read into schema 3.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from lab.record import counted
from lab.record import flags as flag_registry
from lab.record.stepparts import PARTS, Evidence, Latency, Load, Resources
from lab.record.window import Measured, Sampled

__all__ = [
    "Measured",
    "Sampled",
    "StepKey",
    "StepRecord",
    "Raised",
    "amended",
    "flat",
    "nested",
    "step_record",
]
NOTHING_SAMPLED = Sampled()  # a step nothing was sampled around (skipped, or not started)

SCHEMA_VERSION = 3
READABLE_SCHEMAS = (1, 2, 3)
# `dropped` is open loop only: a request due while the cap on outstanding requests was full.
ERROR_KINDS = (
    "refused",
    "reset",
    "timeout",
    "http_5xx",
    "http_4xx",
    "bad_body",
    "other",
    "dropped",
)
STATUSES = ("measured", "partial", "skipped")


def level_label(users: float | None, rate_rps: float | None = None) -> str:
    """A load level in words: "10 users" (closed loop) or "300 req/s" (open loop). Users, not
    "concurrency": that word is the per-process knob."""
    if rate_rps is not None:
        return f"{rate_rps:g} req/s"
    return f"{users or 0:g} user{'' if users == 1 else 's'}"


@dataclass(frozen=True)
class StepKey:
    """What identifies a step: model, mode, the point's load and the trial."""

    model: str
    mode: str  # "closed" (users, no think time) or "open" (arrival rate)
    users: int | None  # closed loop
    rate_rps: float | None  # open loop
    trial: int

    @property
    def label(self) -> str:
        return level_label(self.users, self.rate_rps)

    @property
    def level(self) -> float:
        """The point's position on a sweep's axis: users, or the arrival rate."""
        return float(self.rate_rps if self.rate_rps is not None else self.users or 0)


@dataclass(frozen=True)
class Raised:
    """A flag raised on a step, with the evidence that explains it."""

    flag: str
    evidence: Any = None

    def __post_init__(self) -> None:
        flag_registry.declared(self.flag)  # an undeclared flag is a bug: fail where it is raised


OPEN_LOOP_COUNTS = ("scheduled", "sent", "completed", "unfinished", "not_sent")


@dataclass(frozen=True)
class StepRecord:
    """One step, as written to `steps.jsonl` (one JSON object per line): its key, its window and
    the four parts of its figures (`lab.record.stepparts`: load, latency, resources, evidence)."""

    run_id: str
    model: str
    mode: str
    users: int | None
    rate_rps: float | None
    max_outstanding: int | None
    trial: int
    status: str  # measured | partial (interrupted) | skipped (nothing measured; flags say why)
    started_at: str  # ISO 8601 UTC, start of the measured window
    duration_s: float  # the measured window, warm-up and settle excluded
    histogram: str  # the `.hlog`, relative to the run directory ("" when none)
    timeseries: dict[str, list[float]]
    load: Load
    latency: Latency
    resources: Resources
    evidence: Evidence
    schema_version: int = SCHEMA_VERSION

    @property
    def key(self) -> StepKey:
        return StepKey(self.model, self.mode, self.users, self.rate_rps, self.trial)

    @property
    def is_trial(self) -> bool:
        """A trial of its point: something was measured. A skipped step records only why not
        (its flags); its zero throughput and empty latencies are no measurement, so no mean,
        spread or count of trials may take them in."""
        return self.status != "skipped"

    def ms_per_request(self, cpu_pct: float) -> float | None:
        """A mean CPU over the window (100 = one core) as CPU ms per request answered or
        failed (None: nothing counted): the one conversion every cost per request uses."""
        if self.load.requests <= 0 or self.duration_s <= 0:
            return None
        return cpu_pct * self.duration_s * 10 / self.load.requests

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


# Which part holds each figure: `nested` sorts a flat mapping of figures into the parts by it.
_PART_OF = {f.name: name for name, part in PARTS.items() for f in fields(part)}
FIGURES = tuple(_PART_OF)  # every figure's name, flat


def nested(values: Mapping[str, Any]) -> dict[str, Any]:
    """A record's constructor arguments from a flat mapping (the key and window under their own
    names, every figure under its own): each figure goes to its part."""
    out = {k: v for k, v in values.items() if k not in _PART_OF}
    for name, part in PARTS.items():
        out[name] = part(**{k: v for k, v in values.items() if _PART_OF.get(k) == name})
    return out


def flat(record: StepRecord) -> dict[str, Any]:
    """Every field of a record under its own name, the parts' figures beside the key: a table's
    row, or the names a schema-2 line used."""
    row = {f.name: getattr(record, f.name) for f in fields(record) if f.name not in PARTS}
    for name in PARTS:
        row |= asdict(getattr(record, name))
    return row


def amended(record: StepRecord, **changes: Any) -> StepRecord:
    """The record with these fields changed, each named as itself wherever its part is (the
    verdict adds its limit and costs; a profile its details)."""
    parts = {
        name: replace(getattr(record, name), **mine)
        for name in PARTS
        if (mine := {k: v for k, v in changes.items() if _PART_OF.get(k) == name})
    }
    rest = {k: v for k, v in changes.items() if k not in _PART_OF}
    return replace(record, **rest, **parts)


def step_record(
    run_id: str,
    key: StepKey,
    measured: Measured,
    sampled: Sampled = NOTHING_SAMPLED,
    raised: tuple[Raised, ...] = (),
    *,
    max_outstanding: int | None = None,
    histogram: str = "",
    status: str = "measured",
    context: Mapping[str, Any] | None = None,
    generators: int = 1,
) -> StepRecord:
    """The step record of what was measured: errors and no-response flags follow from the
    figures; the rest are raised by the caller with their evidence. `context`: facts a reader
    needs beside the flags' evidence (e.g. an experiment's case). What limited the step and what
    a request cost are added by `lab.verdict.assess.assessed`, which knows what the knobs allow."""
    open_loop = dict(measured.open_loop or {})
    cut = open_loop or dict(measured.closed_loop)  # the loop's figures at the window's cut-off
    errors, derived = _from_figures(measured, status)
    dropped = int(open_loop.get("dropped") or 0)
    counts = counted.facts(
        (measured.requests, measured.ok, dropped),
        measured.latency_ms,
        measured.all_latency_ms,
        measured.failed_latency_ms,
        (measured.generator_lag, measured.late_sends),
        cut,
    )
    everything = (*raised, *derived)
    names = tuple(dict.fromkeys(r.flag for r in everything))
    evidence = _evidence(everything, context, measured.open_loop)
    duration = measured.duration_s
    in_window = cut.get("ok_in_window", measured.ok)  # answered in the window, whenever sent
    values = dict(
        run_id=run_id,
        **asdict(key),
        max_outstanding=max_outstanding,
        status=status,
        started_at=measured.started_at,
        duration_s=duration,
        requests=measured.requests,
        ok=measured.ok,
        errors=errors,
        throughput_rps=round(in_window / duration, 2) if duration > 0 else 0.0,
        latency_ms=dict(measured.latency_ms),
        client_cpu_pct=measured.client_cpu_pct,
        flags=names,
        histogram=histogram if measured.ok else "",
        timeseries={**measured.timeseries, **sampled.timeseries},
        details=evidence,
        generators=generators,
        generator_lag_ms=dict(measured.generator_lag_ms),
        generator_periodic_pct=measured.generator_periodic_pct,
        **_answers(measured),
        **_sampled_figures(sampled),
        **_open_loop_fields(cut),
        **counts,
    )
    return StepRecord(**nested(values))


def _answers(measured: Measured) -> dict[str, Any]:
    """The answers by route, by when they arrived and by latency, as the record keeps them."""
    return {
        "routes": {k: dict(v) for k, v in measured.routes.items()},
        "answers_100ms": tuple(measured.answers_100ms),
        "answers_by_latency": tuple(measured.answers_by_latency),
    }


def _sampled_figures(sampled: Sampled) -> dict[str, Any]:
    """Every figure of `Sampled` that the record keeps under the same name, so that a figure
    added to both reaches every step; its series join the generator's in `timeseries`."""
    kept = set(FIGURES)
    return {f.name: getattr(sampled, f.name) for f in fields(Sampled) if f.name in kept}


def _from_figures(measured: Measured, status: str) -> tuple[dict[str, int], list[Raised]]:
    """Errors by kind (open loop: requests never sent count as `dropped`) and the flags that
    follow from the figures alone."""
    dropped = (measured.open_loop or {}).get("dropped")
    errors = {k: int(v) for k, v in {**measured.errors, "dropped": dropped}.items() if v}
    derived = [Raised("errors", errors)] if errors else []
    if not measured.ok and status == "measured":
        derived.append(Raised("no_responses"))
    return errors, derived


def _evidence(
    raised: tuple[Raised, ...], context: Mapping[str, Any] | None, open_loop: Any
) -> dict[str, Any]:
    """The caller's context, each flag's evidence and the open-loop figures."""
    evidence = dict(context or {})
    evidence |= {r.flag: r.evidence for r in raised if r.evidence not in (None, {}, "")}
    if open_loop is not None:
        evidence["open_loop"] = dict(open_loop)
    return evidence


def _open_loop_fields(open_loop: dict[str, Any]) -> dict[str, Any]:
    """The loop's counts at the cut-off (open loop: every one; closed: `unfinished`) and which
    percentiles are lower bounds."""
    counts = {k: open_loop[k] for k in OPEN_LOOP_COUNTS if k in open_loop}
    return {"latency_lower_bounds": tuple(open_loop.get("lower_bounds", ())), **counts}
