"""What limits each model, in one sentence per model and mode, from the steps' `limited_by`.

A pure function of step records: for each model the levels it scaled through with nothing
running out, then the first resource that did, the throughput it peaked at and what a request
cost, e.g. "gunicorn-gevent: scales to 200 users, then server CPU (1 core at 97%) limits it at
640 req/s; 1.5 ms CPU per request".
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Sequence

from lab.record.step import StepRecord
from lab.verdict.limits import LABS_OWN, TITLES
from lab.verdict.rules import DATABASES


def model_sentences(records: Sequence[StepRecord]) -> list[str]:
    """One sentence per model and mode, in order; records without a limit are left out."""
    groups: dict[tuple[str, str], dict[float, list[StepRecord]]] = {}
    for r in records:
        if r.evidence.limited_by and r.status == "measured":
            groups.setdefault((r.model, r.mode), {}).setdefault(r.key.level, []).append(r)
    return [_sentence(model, mode, levels) for (model, mode), levels in sorted(groups.items())]


def _sentence(model: str, mode: str, levels: dict[float, list[StepRecord]]) -> str:
    unit = "users" if mode == "closed" else "req/s offered"
    ordered = sorted(levels.items())
    limits = [(level, _common(rs)) for level, rs in ordered]
    # the level's throughput as its point prints it and every claim tests it: its trials' mean
    peak = max(statistics.fmean(r.load.throughput_rps for r in rs) for _, rs in ordered)
    # The limit is the first above the highest level that tracked the ideal, the model's own
    # before the lab's: a disturbance at a lower level (a busy machine for one step) is no
    # limit of a model that scaled past it.
    scaled = max((lv for lv, r in limits if r.evidence.limited_by == "none"), default=-math.inf)
    above = [(lv, r) for lv, r in limits if r.evidence.limited_by != "none" and lv > scaled]
    own = [(lv, r) for lv, r in above if r.evidence.limited_by not in LABS_OWN]
    first = next(iter(own or above), None)
    cost = _cost([r for _, rs in ordered for r in rs])
    if first is None:
        top = ordered[-1][0]
        reached = f"{peak:.0f} req/s, no limit reached"
        return f"{model}: scales to {top:g} {unit} (the highest measured), {reached}{cost}"
    level, r = first
    free = [lv for lv, x in limits if x.evidence.limited_by == "none" and lv < level]
    scales = f"scales to {free[-1]:g} {unit}, then" if free else f"from {level:g} {unit},"
    what = f"{TITLES.get(r.evidence.limited_by, r.evidence.limited_by)} ({r.evidence.limit_reason})"
    return f"{model}: {scales} {what} limits it at {peak:.0f} req/s{cost}"


def _common(records: list[StepRecord]) -> StepRecord:
    """The first trial whose limit is the most common among the trials of one level (the first
    in alphabetical order among equally common ones: the same whatever the records' order)."""
    counts = Counter(r.evidence.limited_by for r in records)
    name = min(counts, key=lambda n: (-counts[n], n))
    return min((r for r in records if r.evidence.limited_by == name), key=lambda r: r.trial)


def _cost(records: list[StepRecord]) -> str:
    cpu = [
        r.resources.server_cpu_ms_per_req
        for r in records
        if r.resources.server_cpu_ms_per_req is not None
    ]
    app = [
        r.resources.apparatus_cpu_ms_per_req
        for r in records
        if r.resources.apparatus_cpu_ms_per_req is not None
    ]
    kb = [
        r.resources.server_rss_kb_per_conn
        for r in records
        if r.resources.server_rss_kb_per_conn is not None
    ]
    parts = []
    if cpu:
        parts.append(f"{statistics.median(cpu):.2g} ms server CPU per request")
    if app:
        parts.append(f"{statistics.median(app):.2g} ms apparatus CPU")
    if kb:
        parts.append(f"{statistics.median(kb):.0f} KB per connection")
    for kind, name in DATABASES.items():
        db = [
            r.resources.database_cpu_ms_per_req[kind]
            for r in records
            if kind in r.resources.database_cpu_ms_per_req
        ]
        if db:
            parts.append(f"{statistics.median(db):.2g} ms {name} CPU")
    return "; " + ", ".join(parts) if parts else ""
