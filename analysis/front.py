"""What nginx in front costs each model, from a sweep that ran both (`lab run --front bare,nginx`).

Each model and its NAME+nginx twin were measured at the same levels, interleaved like trials, so
the differences are the front's: its CPU per request, what it added to p50 and p99, what it did
to the server's own CPU per request (a uWSGI model no longer accepts and closes a connection per
request) and whether the models' order by throughput changes behind it. Only steps fair for the
verdict count; an order that flips by less than the noise of a single trial is not a change.
"""

from __future__ import annotations

from collections import defaultdict
from statistics import mean

from lab.front.nginx import SUFFIX
from lab.record.step import StepRecord, level_label

NOISE = 0.10  # a single trial's throughput differs by up to ~10% run to run (the summary says so)


def _means(records: list[StepRecord]) -> dict[tuple[str, int], dict[str, float]]:
    """Per (model, users): the fair measured steps' mean figures."""
    grouped: dict[tuple[str, int], list[StepRecord]] = defaultdict(list)
    for r in records:
        if r.status == "measured" and r.users is not None and not r.excluded_by and r.ok:
            grouped[(r.model, r.users)].append(r)
    return {
        key: {
            "rps": mean(s.throughput_rps for s in steps),
            "p50": mean(s.latency_ms.get("p50", 0.0) for s in steps),
            "p99": mean(s.latency_ms.get("p99", 0.0) for s in steps),
            "server_ms": mean(s.server_cpu_ms_per_req or 0.0 for s in steps),
            "front_ms": mean(s.front_cpu_ms_per_req or 0.0 for s in steps),
        }
        for key, steps in grouped.items()
    }


def front_costs(records: list[StepRecord]) -> list[str]:
    """One line per model and level measured both ways, then the ranking per level."""
    figures = _means(records)
    lines, levels = [], sorted({users for _, users in figures})
    for (model, users), bare in sorted(figures.items()):
        front = figures.get((model + SUFFIX, users))
        if model.endswith(SUFFIX) or front is None:
            continue
        lines.append(
            f"behind nginx, {model} at {level_label(users)}: "
            f"front CPU {front['front_ms']:.2f} ms/req, "
            f"server CPU {bare['server_ms']:.2f} -> {front['server_ms']:.2f} ms/req, "
            f"p50 {front['p50'] - bare['p50']:+.1f} ms, p99 {front['p99'] - bare['p99']:+.1f} ms, "
            f"{bare['rps']:.0f} -> {front['rps']:.0f} req/s"
        )
    for users in levels if lines else []:
        lines.append(_ranking(figures, users))
    return lines


def _ranking(figures: dict[tuple[str, int], dict[str, float]], users: int) -> str:
    """The models' order by throughput at one level, bare and behind nginx, and whether the
    front changed it (a pair flipped by more than the noise both ways)."""
    pairs = [
        (m, figures[(m, users)]["rps"], figures[(m + SUFFIX, users)]["rps"])
        for (m, u) in figures
        if u == users and not m.endswith(SUFFIX) and (m + SUFFIX, users) in figures
    ]
    bare = [m for m, _, _ in sorted(pairs, key=lambda p: -p[1])]
    front = [m for m, _, _ in sorted(pairs, key=lambda p: -p[2])]
    flipped = [
        f"{a} and {b}"
        for a, a_bare, a_front in pairs
        for b, b_bare, b_front in pairs
        if a_bare > b_bare * (1 + NOISE) and b_front > a_front * (1 + NOISE)
    ]
    said = f"changes ({'; '.join(flipped)} swap places)" if flipped else "unchanged by the front"
    order = f"bare {' > '.join(bare)}; behind nginx {' > '.join(front)}"
    return f"ranking at {level_label(users)} by req/s: {order}: {said}"
