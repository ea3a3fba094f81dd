"""How to run the user's app: the configuration the answer's model was measured as, and the one to
run on this machine's cores at the heaviest level measured.

The second is `lab advise`'s own computation (lab.verdict.sizing): processes from the CPU per
request measured at that level, the pool from Little's law at the throughput and latency measured
there. It is a projection from measured figures, said as one, never a measured result.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from lab.record.step import StepRecord
from lab.verdict.sizing import configuration_words, to_run


def measured_as(entry: Mapping[str, Any], knobs: Mapping[str, Any]) -> str:
    """The configuration a model ran as in the run, from its manifest entry (`processes x
    threads`), "" where the manifest does not say."""
    unit, capacity = entry.get("unit"), entry.get("capacity")
    processes = int(knobs.get("processes") or 1)
    if not unit or not capacity:
        return ""
    if unit == "process":
        return configuration_words(int(capacity), 1, unit)
    return configuration_words(processes, max(1, int(capacity) // processes), unit)


def how_to_run(
    records: Sequence[StepRecord], manifest: Mapping[str, Any], model: str, level: float
) -> str:
    """One line for `model` at `level`: what was measured, and what to run on this machine."""
    entry = manifest.get("models", {}).get(model, {})
    measured = measured_as(entry, manifest.get("knobs") or {})
    rows = [r for r in records if r.model == model and r.key.level == level and r.load.ok > 0]
    costs = [
        r.resources.deployed_cpu_ms_per_req for r in rows if r.resources.deployed_cpu_ms_per_req
    ]
    if not measured or not rows:
        return ""
    said = f"{model} was measured as {measured}"
    if not costs:
        return f"{said}; no CPU per request was measured, so no configuration is projected"
    environment = manifest.get("environment") or {}
    cores = len(environment.get("cpus_usable") or ()) or int(environment.get("cpus") or 1)
    rate = statistics.fmean(r.load.throughput_rps for r in rows)
    latency = statistics.fmean(r.latency.latency_ms.get("mean", 0.0) for r in rows)
    sized = to_run(model, entry["unit"], rate, latency, statistics.fmean(costs), cores)
    return (
        f"{said}; to run it on this machine's {cores} cores at {rows[0].key.label}, projected from "
        f"the measured figures: {sized.why}"
    )
