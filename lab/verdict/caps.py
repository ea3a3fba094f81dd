"""The verdict's cap rules: in flight plateaued below the offered load, and the knobs explain it
(`knob_cap`), a pool of the user's app does (`app_pool`: its processes held about as many
connections to the lab's PostgreSQL, Redis or upstream as the plateau), or nothing does
(`hidden_cap`). Beside the other rules (`lab.verdict.rules`), which they share `Finding` with;
their place in the order is `lab.verdict.table`'s."""

from __future__ import annotations

from typing import Any

from lab.record.thresholds import T
from lab.verdict import words
from lab.verdict.facts import Facts
from lab.verdict.rules import Finding


def _plateau(f: Facts) -> dict[str, Any] | None:
    """In-flight plateaued below the offered load while requests queued, on a server with CPU to
    spare and nothing else disturbing the step: the cap's evidence, or None. A generator waiting
    for a CPU a little does not empty the upstream's counter (its users' requests stay in
    flight), so the counter path ignores that one; the inference from outside does not."""
    ignored = {"apparatus_cpu_wait"} if f.inflight_seen else set()
    # Failures never lift a cap: Little's law counts answered requests only, so where requests
    # failed the pool they left full is at least what the answers show, never less.
    d = f.cap.delay_ms
    queueing = T.queueing_delays if f.inflight_seen else T.queueing_inferred_delays
    if f.inflight < 0 or f.offered < T.min_offered_requests or d <= 0:
        return None
    if f.inflight > T.plateau_share * f.offered or f.wait_ms < queueing * d:
        return None
    if not f.idle or f.disturbances - ignored:
        return None
    mean = f" (mean {f.wait_ms:.0f} ms)" if f.wait_ms > f.p50_ms else ""
    evidence: dict[str, Any] = {
        "ceiling": round(f.inflight, 1),
        "offered": round(f.offered, 1),
        "seen_by": "the upstream's in-flight counter"
        if f.inflight_seen
        else f"Little's law: {f.r.load.throughput_rps:g} req/s x {d:g} ms",
        "queueing": f"~{1 - f.inflight / f.offered:.0%} of requests wait; p50 {f.p50_ms:.0f} ms"
        f"{mean} against d = {d:g} ms",
        "knobs": f.cap.knob,
    }
    if f.cap.probe_cap is not None:
        evidence["probe"] = f"the probe overlapped about {f.cap.probe_cap:g} requests at once"
    return evidence


def _explained(f: Facts) -> bool:
    """The knobs allow about what plateaued: neither more (then something else capped it) nor
    less (a plateau above the knobs is not theirs: more came in than they let through)."""
    tolerance = 1 + T.knob_cap_tolerance_share
    return (
        f.cap.requests <= f.inflight * tolerance + 1
        and f.inflight <= f.cap.requests * tolerance + 1
    )


def knob_cap(f: Facts) -> Finding | None:
    evidence = _plateau(f)
    if evidence is None or not _explained(f):
        return None
    where = f"{evidence['ceiling']:.0f} requests in flight of {evidence['offered']:g} offered"
    return Finding(f"{where}: the knobs' {f.cap.knob} explain it", evidence)


# what holds the connections to each lab service, and the knob that sizes it
POOLS = {
    "postgres": (
        "PostgreSQL",
        "SQLAlchemy's pool_size + max_overflow, or the driver's pool",
    ),
    "redis": ("Redis", "redis-py's ConnectionPool max_connections"),
    "upstream": ("the upstream", "the HTTP client's pool (a requests Session's pool_maxsize)"),
}


def _about(n: float, m: float) -> bool:
    tolerance = 1 + T.knob_cap_tolerance_share
    return n <= m * tolerance + 1 and m <= n * tolerance + 1


def app_pool(f: Facts) -> Finding | None:
    """A plateau the knobs do not explain, about as high as the connections the app's
    processes held to one of the lab's services: the app's own pool is the limit."""
    evidence = _plateau(f)
    if evidence is None or _explained(f):
        return None
    held = {k: n for k, n in f.r.load.app_connections.items() if n > 0}
    # one connection held by one request at a time is a model that serialised, not a pool
    matching = [(n, k) for k, n in held.items() if n >= 2 and _about(n, f.inflight)]
    if not matching:
        return None
    n, service = max(matching)
    where, knob = POOLS.get(service, (service, "its pool"))
    evidence["connections"] = held
    ceiling, offered = evidence["ceiling"], evidence["offered"]
    return Finding(
        f"{ceiling:.0f} requests in flight of {offered:g} offered: your app's own pool, its "
        f"processes held at most {n} connections to {where}, about the plateau ({knob})",
        evidence,
    )


def hidden_cap(f: Facts) -> Finding | None:
    evidence = _plateau(f)
    if evidence is None or _explained(f):
        return None
    allows = f"the knobs allow {f.cap.requests}: {f.cap.knob}"
    probe = (
        f"; the probe found the same, about {f.cap.probe_cap:g} at once" if f.cap.probe_cap else ""
    )
    ceiling, offered = evidence["ceiling"], evidence["offered"]
    if f.inflight_seen:
        return Finding(
            f"{ceiling:.0f} requests in flight of {offered:g} offered: no knob explains it "
            f"({allows}){probe}",
            evidence,
        )
    per = evidence["per_process"] = words.two_digits(f.inflight / max(f.cap.processes, 1))
    at_once = f"about {per:.0f} requests" if per >= 1 else f"fewer than one request ({per:g})"
    return Finding(
        f"your app, or something it calls, lets {at_once} run at once per process ({ceiling:.1f} "
        f"in flight by Little's law, of {offered:g} offered; {allows}){probe}: a connection pool, "
        "a lock or a semaphore?",
        evidence,
    )
