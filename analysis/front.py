"""What nginx in front costs each model, from a sweep that ran both (`lab run --front bare,nginx`).

Each model and its NAME+nginx twin were measured at the same levels, interleaved like trials, so
the differences are the front's: its CPU per request, what it added to p50 and p99, what it did
to the server's own CPU per request (a uWSGI model no longer accepts and closes a connection per
request) and whether the models' order by throughput changes behind it. Only steps fair for the
verdict count; an order that flips only within noise (the one test of difference,
`lab.verdict.difference`) is not a change, and a ranking prints models the test ties as ties
("a = b > c").
"""

from __future__ import annotations

from collections import defaultdict
from statistics import mean

from lab.front.nginx import SUFFIX
from lab.record.step import StepRecord, level_label
from lab.verdict.difference import differ, side

Steps = dict[tuple[str, int], list[StepRecord]]  # (model, users) -> its fair measured steps


def _fair(records: list[StepRecord]) -> Steps:
    grouped: Steps = defaultdict(list)
    for r in records:
        if r.status == "measured" and r.users is not None and not r.excluded_by and r.ok:
            grouped[(r.model, r.users)].append(r)
    return grouped


def _means(grouped: Steps) -> dict[tuple[str, int], dict[str, float]]:
    """Per (model, users): the fair measured steps' mean figures (throughput and p99 as the one
    test of difference takes them)."""
    return {
        key: {
            "rps": side(steps, "rps").value,  # the figures the test compares
            "p50": mean(s.latency_ms.get("p50", 0.0) for s in steps),
            "p99": side(steps, "p99").value,
            "server_ms": mean(s.server_cpu_ms_per_req or 0.0 for s in steps),
            "front_ms": mean(s.front_cpu_ms_per_req or 0.0 for s in steps),
        }
        for key, steps in grouped.items()
    }


def front_costs(records: list[StepRecord]) -> list[str]:
    """One line per model and level measured both ways, then the ranking per level."""
    grouped = _fair(records)
    figures = _means(grouped)
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
        lines.append(_ranking(figures, grouped, users))
    return lines


def _ranking(figures: dict[tuple[str, int], dict[str, float]], grouped: Steps, users: int) -> str:
    """The models' order by throughput at one level, bare and behind nginx, and whether the
    front changed it (a pair apart beyond noise both ways, in opposite orders)."""
    pairs = [
        (m, figures[(m, users)]["rps"], figures[(m + SUFFIX, users)]["rps"])
        for (m, u) in figures
        if u == users and not m.endswith(SUFFIX) and (m + SUFFIX, users) in figures
    ]
    bare = _order(grouped, [(m, r) for m, r, _ in pairs], users, "")
    front = _order(grouped, [(m, r) for m, _, r in pairs], users, SUFFIX)
    flipped = [
        f"{a} and {b}"
        for a, a_bare, a_front in pairs
        for b, b_bare, b_front in pairs
        if a_bare > b_bare
        and b_front > a_front
        and _apart(grouped, b, a, users, "")
        and _apart(grouped, a, b, users, SUFFIX)
    ]
    said = f"changes ({'; '.join(flipped)} swap places)" if flipped else "unchanged by the front"
    order = f"bare {bare}; behind nginx {front}"
    return f"ranking at {level_label(users)} by req/s: {order}: {said}"


def _order(grouped: Steps, ranked: list[tuple[str, float]], users: int, suffix: str) -> str:
    """The models from the highest throughput down, "a = b > c": `>` only where the one test
    calls the two neighbours apart, `=` where it ties them."""
    names = [m for m, _ in sorted(ranked, key=lambda p: (-p[1], p[0]))]
    out = names[:1]
    for higher, lower in zip(names, names[1:], strict=False):
        out += [">" if _apart(grouped, lower, higher, users, suffix) else "=", lower]
    return " ".join(out)


def _apart(grouped: Steps, low: str, high: str, users: int, suffix: str) -> bool:
    """`high` (behind `suffix`) is apart from `low` on throughput at `users`."""
    a, b = (side(grouped[(m + suffix, users)], "rps") for m in (low, high))
    return differ(a, b).apart
