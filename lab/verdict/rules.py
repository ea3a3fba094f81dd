"""The verdict's rules: each a small named check of a step's facts (the ordered table: `table`).

Each rule is small and named, reads only the step's facts (`lab.verdict.facts`) and the one set
of thresholds (`lab.record.thresholds`), and says its limit, the evidence it reads, its advice and
what it does to the comparison:

- `excluded`: the step is compared on nothing (a fault, the lab's own limit, a hidden cap);
- `tail`: its throughput counts, its tail does not (failed requests the p99 leaves out);
- `compared`: the model's own limit, a fair result.

The order is the precedence: what makes the figures untrustworthy first (a fault, a serialised
model), then what the server itself ran out of (memory, CPU; where the apparatus was full too,
`both_full`: the lab's limit as much as the model's, compared on nothing), then the lab's own
apparatus and the host, then caps, then failed requests (a cap the upstream's counter saw stays the
limit when requests also failed: failures never make a step more comparable), then the rest. Rules
after the first that fire are kept as secondary evidence, and a `tail` rule qualifies the comparison
wherever it stands.
Adding a rule is one entry in `lab.verdict.table.RULES` (and, for a new limit, one in
`lab.verdict.limits.LIMITS`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lab.record.counted import hides_p99
from lab.record.thresholds import T
from lab.verdict import words
from lab.verdict.facts import Facts

EXCLUDED, TAIL, COMPARED = "excluded", "tail", "compared"


@dataclass(frozen=True)
class Finding:
    reason: str  # plain words with the figures
    evidence: dict[str, Any] | None = None  # the evidence of the flag the rule raises


@dataclass(frozen=True)
class Rule:
    name: str
    limit: str  # a key of lab.verdict.limits.LIMITS
    effect: str  # EXCLUDED, TAIL or COMPARED
    when: str  # the condition, in words with the live thresholds (the docs' table)
    advice: str
    check: Callable[[Facts], Finding | None]
    flag: str | None = None  # raised where the rule names the limit (TAIL rules: wherever it fires)


def nothing_measured(f: Facts) -> Finding | None:
    if f.measured:
        return None
    return Finding(f"nothing measured: {', '.join(f.r.evidence.flags) or 'no successful response'}")


def upstream_down(f: Facts) -> Finding | None:
    if "upstream_down" not in f.faults:
        return None
    return Finding(f"the upstream went down: {f.r.evidence.details.get('upstream_down')}")


def fault(f: Facts) -> Finding | None:
    return Finding(f"a fault during the step: {', '.join(f.faults)}") if f.faults else None


def serialized(f: Facts) -> Finding | None:
    if "serialized" not in f.r.evidence.flags:
        return None
    if f.share_of_ideal != f.share_of_ideal:
        return Finding("serialized: requests ran one at a time (see the flag's evidence)")
    ev = against_ideal(f)
    return Finding(
        "serialized: requests ran one at a time (see the flag's evidence), "
        f"{ev['share_of_ideal']:.0%} of the ideal",
        ev,
    )


def against_ideal(f: Facts) -> dict[str, float]:
    """The throughput against the ideal, the figures a reason quotes (rounded as kept)."""
    return {"share_of_ideal": round(f.share_of_ideal, 4), "ideal_rps": round(f.ideal_rps, 2)}


def _of_ideal(ev: dict[str, Any]) -> str:
    return f"throughput {ev['share_of_ideal']:.0%} of the ideal {ev['ideal_rps']:g} req/s"


def memory(f: Facts) -> Finding | None:
    if f.memory_share < T.server_memory_share:
        return None
    return Finding(
        f"server memory {f.r.resources.server_rss_mb:.0f} MB of {f.cap.memory_mb:.0f} MB"
    )


def _server_cpu(f: Facts) -> str | None:
    """The server's full cores in words, where its answers, not its refusals, used them: a
    server that fails most requests (fast 503s from a full pool) spent its CPU on the failures,
    and they are the limit (the rule `errors`, after the apparatus and the caps)."""
    if not f.cpu_bound or f.failed_share >= T.mostly_failed_share:
        return None
    r = f.r
    if r.resources.front_cpu_pct >= 0:  # nginx on the same cores: the deployment's cores were full
        return (
            f"server CPU ({words.cores(f.cap.cores)} at {r.resources.deployed_cpu_pct:.0f}%: the "
            f"server {r.resources.server_cpu_pct:.0f}%, nginx in front "
            f"{r.resources.front_cpu_pct:.0f}%)"
        )
    return f"server CPU ({words.cores(f.cap.cores)} at {r.resources.deployed_cpu_pct:.0f}%)"


def both_full(f: Facts) -> Finding | None:
    """The server's cores and the lab's apparatus both full: the figure is the lower of two
    limits and nothing tells which, so the step is the lab's too (never best); more generators
    alone cannot lift it, so the reason says what must come first."""
    cpu = _server_cpu(f)
    if cpu is None or not f.lab_disturbances():
        return None
    return Finding(
        f"{cpu} and the lab's apparatus ({words.what_saturated(f)}): both were full, so more "
        "generators alone cannot raise the throughput; more server cores or less CPU per request "
        "first",
        {"deployed_cpu_pct": f.r.resources.deployed_cpu_pct},
    )


def server_cpu(f: Facts) -> Finding | None:
    """The server's cores were full and nothing of the lab's was: the model's own limit."""
    cpu = _server_cpu(f)
    if cpu is None or f.lab_disturbances():
        return None
    return Finding(cpu, {"deployed_cpu_pct": f.r.resources.deployed_cpu_pct})


DATABASES = {"postgres": "PostgreSQL", "redis": "Redis"}  # the kinds the lab starts, in words


def database(f: Facts) -> Finding | None:
    """Below the ideal, nothing of the lab's disturbing, while a database the lab started for
    the app was busy: requests queued in the database, and no server model changes that. Its
    CPU is measured like the server's (its process tree), so this holds for any app whose
    database the lab runs; the server's own cost per request is quoted beside it."""
    r = f.r
    if not (f.below_ideal and r.resources.database_cpu_pct) or f.lab_disturbances():
        return None
    kind, pct = max(r.resources.database_cpu_pct.items(), key=lambda kv: kv[1])
    if pct < T.database_cpu_busy_pct or f.failed_share >= T.mostly_failed_share:
        return None
    mine, server = r.ms_per_request(pct), r.ms_per_request(r.resources.server_cpu_pct)
    cost = f", {mine:.2f} ms CPU per request (the server {server:.2f} ms)" if mine else ""
    figures = {"database_cpu_ms_per_req": mine, "server_cpu_ms_per_req": server} if mine else {}
    return Finding(
        f"the app's {DATABASES.get(kind, kind)} used {pct:.0f}% of a core{cost}: requests queued "
        "in the database, whatever the server's model",
        {"database": kind, "database_cpu_pct": pct, **figures},
    )


def server_busy(f: Facts) -> Finding | None:
    """A server's cores nearly busy while requests waited, below the ideal, nothing else
    disturbing: a core that busy makes requests queue for it (an event loop at 85% of its one
    core waits most of the time for its turn), so the CPU, not a pool, is the limit; its own
    run-queue wait (schedstat) is quoted where it was measured."""
    busy = f.server_cpu_share >= T.server_cpu_busy_share and not f.cpu_bound
    queued = f.p50_ms >= T.queueing_delays * f.cap.delay_ms
    if (
        not (busy and queued and f.below_ideal)
        or f.disturbed
        or f.failed_share >= T.mostly_failed_share
    ):
        return None
    waited = (
        f"; {words.waited(f.r.resources.server_wait_pct)}"
        if f.r.resources.server_wait_pct > 0
        else ""
    )
    share = round(f.server_cpu_share, 4)
    return Finding(
        f"server CPU {share:.0%} of {words.cores(f.cap.cores)}: a core that busy makes requests "
        f"queue for it (p50 {f.p50_ms:.0f} ms against d = {f.cap.delay_ms:g} ms{waited})",
        {"server_cpu_share": share},
    )


def front(f: Facts) -> Finding | None:
    """nginx in front ran out, not the model behind it: its error log said so during the window
    (flag `front_limited`: worker_connections are not enough, or its own file descriptors),
    its keepalive pool to an HTTP server was full below the ideal (a new connection for many
    requests), its workers' CPU was full, or the cores it shares with the server were full and it
    used more of them than the server did; or, below the ideal with neither full, the two took
    turns on the cores they share (`_taking_turns`)."""
    r, workers, full = f.r, f.cap.front_workers, T.server_cpu_saturated_share * 100
    if r.resources.front_cpu_pct < 0:
        return None
    if "front_limited" in r.evidence.flags:
        return Finding(f"nginx's error log: {r.evidence.details.get('front_limited')}")
    churn = (
        round(r.load.front_server_connections / r.load.requests, 4) if r.load.requests > 0 else 0.0
    )
    if churn >= T.front_pool_churn_share and f.below_ideal:
        return Finding(
            f"nginx opened and closed {r.load.front_server_connections} connections to the server "
            f"for {r.load.requests} requests ({churn:.0%}): its keepalive pool was full, so "
            "requests paid a new connection each",
            {"new_connections_per_request": churn},
        )
    own = r.resources.front_cpu_pct >= full * max(workers, 1)
    shared = r.resources.server_cpu_pct + r.resources.front_cpu_pct >= full * f.cap.cores
    if not (own or (shared and r.resources.front_cpu_pct >= r.resources.server_cpu_pct)):
        return _taking_turns(f)
    return Finding(
        f"nginx in front used {r.resources.front_cpu_pct:.0f}% CPU ({workers} "
        f"worker{'s' if workers != 1 else ''}) beside the server's "
        f"{r.resources.server_cpu_pct:.0f}% on {words.cores(f.cap.cores)}: the front, not the "
        "model, ran out"
    )


def _taking_turns(f: Facts) -> Finding | None:
    """nginx and the server took turns on the cores they share (the lab pins the front beside
    the server): neither's CPU was full, but every request crosses those cores twice more, and
    the server waited for a CPU while nginx ran. Measured (gunicorn-gevent, 100 users, 1 core):
    beside the server 72% of the ideal, p50 136 ms; nginx moved to another core 86%, 113 ms;
    bare 91%, 108 ms."""
    r = f.r
    if (
        not f.below_ideal
        or r.resources.others_on_cores
        or r.resources.server_wait_pct < T.front_turns_wait_pct
    ):
        return None
    return Finding(
        f"nginx and the server took turns on the {words.cores(f.cap.cores)} they share: the server "
        f"waited for a CPU {r.resources.server_wait_pct:.0f}% of the window while nginx used "
        f"{r.resources.front_cpu_pct:.0f}% of a core, neither full; each request crosses those "
        "cores twice more than bare",
        {"server_wait_pct": r.resources.server_wait_pct},
    )


def errors(f: Facts) -> Finding | None:
    if not hides_p99(f.failed_share):
        return None
    kinds = sorted(f.r.load.errors.items(), key=lambda kv: (-kv[1], kv[0]))
    said = ", ".join(f"{k} {v}" for k, v in kinds) or "unanswered at the cut-off"
    ev: dict[str, Any] = {"failed_share": round(f.failed_share, 4), "errors": dict(f.r.load.errors)}
    pool = ""
    if (
        f.failed_share >= T.mostly_failed_share
        and f.cap.delay_ms > 0
        and f.r.load.throughput_rps > 0
    ):
        ev["held_by_littles_law"] = words.two_digits(
            f.r.load.throughput_rps * f.cap.delay_ms / 1000
        )
        pool = (
            f"; the answers, {f.r.load.throughput_rps:g} req/s, are what about "
            f"{ev['held_by_littles_law']:g} requests in flight for d = {f.cap.delay_ms:g} ms allow "
            "(Little's law): a pool that size was full and the rest failed, and the CPU went on "
            "the failures"
        )
    return Finding(
        f"{ev['failed_share']:.1%} of requests failed or were dropped ({said}){pool}", ev
    )


def upstream_slow(f: Facts) -> Finding | None:
    """The upstream held the step's requests longer than its delay by its own evidence: its
    event loop stalled (late by at least `upstream_slow_delays` d at its worst) while the step's
    load went through it, below the ideal. Judged by the upstream's figures alone, whatever the
    server's CPU did, so two models behind the same slow upstream are judged alike; the client's
    latency is never quoted as the upstream's."""
    stalled_ms = f.r.evidence.upstream_lag_max_ms
    through = f.inflight_seen and f.r.load.upstream_served > 0
    if not (through and f.below_ideal and stalled_ms >= T.upstream_slow_delays * f.cap.delay_ms):
        return None
    return Finding(
        f"the upstream's own event loop stalled: late by up to {stalled_ms:g} ms (on average "
        f"{f.r.evidence.upstream_lag_ms:g} ms) against its {f.cap.delay_ms:g} ms delay, so the "
        "requests it held waited on it, not on the server"
    )


def tracks_ideal(f: Facts) -> Finding | None:
    if f.below_ideal:
        return None
    if f.ideal_rps != f.ideal_rps or f.ideal_rps <= 0:
        return Finding("no resource ran out (no ideal to compare with)")
    ev = against_ideal(f)
    return Finding(_of_ideal(ev), ev)


def not_found(f: Facts) -> Finding:
    """Below the ideal and no rule fired: every figure the rules read, so the reader sees what
    is known (the server's CPU and its own wait for one, the host's, the queue)."""
    r, ev = f.r, against_ideal(f)
    known = [
        _of_ideal(ev),
        f"server CPU {r.resources.server_cpu_pct:.0f}% of {words.cores(f.cap.cores)}",
        f"p50 {f.p50_ms:.0f} ms against d = {f.cap.delay_ms:g} ms",
    ]
    if r.resources.server_wait_pct > 0:
        known.append(words.waited(r.resources.server_wait_pct))
    if f.cap.host_cores:
        known.append(f"the host's {f.cap.host_cores} cores at {r.resources.host_cpu_pct:.0f}%")
    if f.disturbances:
        known.append("disturbed: " + ", ".join(sorted(f.disturbances)))
    return Finding(
        f"below the ideal with no resource saturated: cause not found ({'; '.join(known)})", ev
    )
