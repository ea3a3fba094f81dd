"""What nginx in front costs each model, from a sweep that ran both (`lab run --front bare,nginx`).

Each model and its NAME+nginx twin were measured at the same levels, interleaved like trials, so
the differences are the front's: its CPU per request, what it added to p50 and p99, what it did
to the server's own CPU per request (a uWSGI model no longer accepts and closes a connection per
request) and whether the models' order by throughput changes behind it. It reads the run's points
(`analysis.points`, built once); only points fair for the verdict count; an order that flips only
within noise (the one test of difference, `lab.verdict.difference`) is not a change, and a
ranking prints models the test ties as ties ("a = b > c").
"""

from __future__ import annotations

from statistics import mean

from analysis.points import Point, Points
from lab.record.models import FRONTED
from lab.record.step import level_label
from lab.verdict.difference import differ

Fair = dict[tuple[str, int], Point]  # (model, users) -> its point, every trial fair and measured


def _fair(pts: Points) -> Fair:
    """The closed-loop points the verdict would compare: every trial measured, answered and
    fair (a point with one unfair trial is excluded as a whole, as the judge excludes it)."""
    return {
        (p.model, round(p.level)): p
        for p in pts.values()
        if not p.excluded_by
        and p.records
        and all(r.status == "measured" and r.users is not None and r.load.ok for r in p.records)
    }


def _means(fair: Fair) -> dict[tuple[str, int], dict[str, float]]:
    """Per (model, users): the point's figures (throughput and p99: the sides the one test of
    difference compares; the costs, the means of its trials)."""
    return {
        key: {
            "rps": p.rps,
            "p50": mean(s.latency.latency_ms.get("p50", 0.0) for s in p.records),
            "p99": p.p99_ms,
            "server_ms": mean(s.resources.server_cpu_ms_per_req or 0.0 for s in p.records),
            "front_ms": mean(s.resources.front_cpu_ms_per_req or 0.0 for s in p.records),
        }
        for key, p in fair.items()
    }


def front_costs(pts: Points) -> list[str]:
    """One line per model and level measured both ways, then the ranking per level."""
    grouped = _fair(pts)
    figures = _means(grouped)
    lines, levels = [], sorted({users for _, users in figures})
    for (model, users), bare in sorted(figures.items()):
        front = figures.get((model + FRONTED, users))
        if model.endswith(FRONTED) or front is None:
            continue
        lines.append(
            f"behind nginx, {model} at {level_label(users)}: front CPU {front['front_ms']:.2f} "
            f"ms/req, server CPU {bare['server_ms']:.2f} -> {front['server_ms']:.2f} ms/req, p50 "
            f"{front['p50'] - bare['p50']:+.1f} ms, p99 {front['p99'] - bare['p99']:+.1f} ms, "
            f"{bare['rps']:.0f} -> {front['rps']:.0f} req/s"
        )
    for users in levels if lines else []:
        lines.append(_ranking(figures, grouped, users))
    return lines


def _ranking(figures: dict[tuple[str, int], dict[str, float]], grouped: Fair, users: int) -> str:
    """The models' order by throughput at one level, bare and behind nginx, and whether the
    front changed it (a pair apart beyond noise both ways, in opposite orders)."""
    pairs = [
        (m, figures[(m, users)]["rps"], figures[(m + FRONTED, users)]["rps"])
        for (m, u) in figures
        if u == users and not m.endswith(FRONTED) and (m + FRONTED, users) in figures
    ]
    bare = _order(grouped, [(m, r) for m, r, _ in pairs], users, "")
    front = _order(grouped, [(m, r) for m, _, r in pairs], users, FRONTED)
    flipped = [
        f"{a} and {b}"
        for a, a_bare, a_front in pairs
        for b, b_bare, b_front in pairs
        if a_bare > b_bare
        and b_front > a_front
        and _apart(grouped, b, a, users, "")
        and _apart(grouped, a, b, users, FRONTED)
    ]
    said = f"changes ({'; '.join(flipped)} swap places)" if flipped else "unchanged by the front"
    order = f"bare {bare}; behind nginx {front}"
    return f"ranking at {level_label(users)} by req/s: {order}: {said}"


def _order(grouped: Fair, ranked: list[tuple[str, float]], users: int, suffix: str) -> str:
    """The models from the highest throughput down, "a = b > c": `>` only where the one test
    calls the two neighbours apart, `=` where it ties them."""
    names = [m for m, _ in sorted(ranked, key=lambda p: (-p[1], p[0]))]
    out = names[:1]
    for higher, lower in zip(names, names[1:], strict=False):
        out += [">" if _apart(grouped, lower, higher, users, suffix) else "=", lower]
    return " ".join(out)


def _apart(grouped: Fair, low: str, high: str, users: int, suffix: str) -> bool:
    """`high` (behind `suffix`) is apart from `low` on throughput at `users`."""
    a, b = (grouped[(m + suffix, users)].throughput for m in (low, high))
    return differ(a, b).apart
