"""How far this machine can measure each model: the level where its own apparatus would fill.

The generators and the upstream share the cores the server does not use. Their CPU per request
differs by model (a model that closes a connection per request makes every request pay a connect,
an accept and a close in the generator), so on a small machine the apparatus fills at a lower
level for some models than for others, and those points are the lab's, not the models'
(`lab_limited`). This says where, before a reader has to find it out from flags: per model, the
apparatus's CPU per request at its busiest level measured without its limit, and the users at which
that would fill its cores at the ideal rate (`lab.verdict.capacity.apparatus_ceiling`); a model
whose own limit held it below the apparatus's rate is left out (more users queue in it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from lab.record.flags import outside
from lab.record.step import StepRecord
from lab.verdict.capacity import apparatus_ceiling, apparatus_rate
from lab.verdict.limits import LABS_OWN


def apparatus_cores(manifest: Mapping[str, Any]) -> int:
    """The cores the generators and the upstream ran on (pinned), else every usable core."""
    layout = (manifest.get("execution") or {}).get("cpu_layout") or {}
    pinned = layout.get("client_and_upstream") or []
    usable = (manifest.get("environment") or {}).get("cpus_usable") or []
    return len(pinned) or len(usable)


def ceilings(records: Sequence[StepRecord], cores: int, delay_ms: float) -> dict[str, float]:
    """Model -> the users at which the apparatus would fill its cores, from its CPU per request
    at the busiest closed-loop step the lab did not limit (at a few users the apparatus's idle
    work, spread over few requests, overstates a request's cost; at the busiest it is spread
    over the most). None for a model without such a step."""
    busiest: dict[str, StepRecord] = {}
    for r in records:
        cost = r.resources.apparatus_cpu_ms_per_req
        if r.mode != "closed" or not cost or cost <= 0 or outside(r.evidence.flags):
            continue
        if r.model not in busiest or r.load.throughput_rps > busiest[r.model].load.throughput_rps:
            busiest[r.model] = r
    return {
        model: apparatus_ceiling(r.resources.apparatus_cpu_ms_per_req or 0.0, cores, delay_ms)
        for model, r in sorted(busiest.items())
        if not _own_limit_first(r, cores)
    }


def _own_limit_first(r: StepRecord, cores: int) -> bool:
    """The model's own limit (its server's CPU, a cap, a pool...) held its busiest step below the
    rate at which the apparatus fills: more users would queue in the model, not load the
    apparatus, so no users figure says where the apparatus would stop this model (django-todo:
    server CPU at 28 req/s, the apparatus full near 185, yet 'measured up to about 5 users')."""
    own = r.evidence.limited_by not in LABS_OWN and r.evidence.limited_by not in (
        "none",
        "unknown",
        "",
    )
    rate = apparatus_rate(r.resources.apparatus_cpu_ms_per_req or 0.0, cores)
    return own and r.load.throughput_rps < rate


def ceiling_words(records: Sequence[StepRecord], manifest: Mapping[str, Any]) -> str:
    """'this machine measures these models up to about N users at d = 100 ms (its apparatus, 1
    core: uwsgi-threads ~128 users at 0.70 ms per request, ...)' ("" where unknown)."""
    delay = float((manifest.get("scenario") or {}).get("delay_ms") or 0.0)
    cores = apparatus_cores(manifest)
    found = ceilings(records, cores, delay)
    if not found or delay <= 0 or not cores:
        return ""
    each = ", ".join(f"{m} ~{users:,.0f} users" for m, users in found.items())
    low = min(found.values())
    return (
        f"this machine measures these models up to about {low:,.0f} users at d = {delay:g} ms: "
        f"beyond that the lab's own apparatus ({cores} core{'s' if cores != 1 else ''} for the "
        f"generators and the upstream) fills before some models do ({each}, from each model's "
        "apparatus CPU per request at its busiest step the lab did not limit); more cores, or a "
        "remote generator (`lab generator`), raise it"
    )


def remeasured_words(manifest: Mapping[str, Any]) -> str:
    """What the run measured again because the lab or the machine kept it from a result, and
    what it could not settle within its budget ("" where nothing was owed)."""
    done = manifest.get("remeasured") or {}
    again, left = done.get("steps") or [], done.get("still_owed") or []
    if not again and not left:
        return ""
    said = f"measured again: {len(again)} step(s) the lab or the machine had kept from a result"
    said += f" ({done.get('spent_s', 0):g} s of a {done.get('budget_s', 0):g} s budget)"
    if left:
        said += (
            "; still disturbed when the budget was spent, so this machine was too busy to tell "
            f"there: {', '.join(left)}"
        )
    return said
