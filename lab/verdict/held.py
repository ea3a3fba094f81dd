"""The verdict's rules for a step the server did not limit alone: the lab's own apparatus (the
generators, the upstream), the host, and processes that waited for a CPU.

Apart from `lab.verdict.rules` so that each stays readable in one sitting; they share its
`Finding` and its order is the table's (`lab.verdict.table`): these come after what the server
itself ran out of and before the caps. Each reads only the step's facts and the thresholds.
"""

from __future__ import annotations

from lab.record.thresholds import T
from lab.verdict import words
from lab.verdict.facts import Facts, others_on_server_cores, upstream_lag_limit_ms
from lab.verdict.rules import Finding


def _generator_full(f: Facts) -> bool:
    if "generator_saturated" in f.disturbances:
        return True
    own = f.r.resources.client_cpu_pct >= T.apparatus_own_cpu_pct
    return "apparatus_core" in f.disturbances and own


def host_cpu(f: Facts) -> Finding | None:
    if not (f.host_full and _generator_full(f)):
        return None
    return Finding(
        f"{words.host_full(f)}: more generators on this machine cannot help; run them on another "
        f"(--remote-generators) ({words.what_saturated(f)})"
    )


def connections(f: Facts) -> Finding | None:
    per = f.conns_per_request
    if per is None or per < T.connections_per_request or not _generator_full(f):
        return None
    full = f"; {words.host_full(f)}" if f.host_full else ""
    return Finding(
        f"{words.closing(f)}: more generators share that work but do not remove it, and a server "
        f"that keeps connections alive does not pay it{full} ({words.what_saturated(f)})",
        {"connections_per_request": round(per, 2)},
    )


def upstream_late(f: Facts) -> Finding | None:
    if "upstream_late" not in f.disturbances:
        return None
    limit = upstream_lag_limit_ms(f.cap.delay_ms)
    return Finding(
        f"the upstream's event loop woke {f.r.evidence.upstream_lag_ms:g} ms late on average "
        f"(limit {limit:g} ms): part of every request's wait was the upstream's; give the upstream "
        "more processes or a core of its own",
        {"lag_limit_ms": limit},
    )


def apparatus(f: Facts) -> Finding | None:
    saturated = {"generator_saturated", "apparatus_core"} & f.disturbances
    lag_ms = f.r.evidence.generator_lag_ms.get("p99", 0.0)
    held = lag_ms >= T.generator_lag_throughput_delays * f.cap.delay_ms
    late = "generator_late" in f.disturbances and f.below_ideal and held
    if not (saturated or late):
        return None
    advice = (
        "use more generators"
        if saturated <= {"generator_saturated"}
        else "fewer users, more generators, or a machine with more cores"
    )
    return Finding(f"{words.what_saturated(f)}: {advice}")


def host_busy(f: Facts) -> Finding | None:
    """Below the ideal while the run's processes waited for a CPU that others took: other
    processes busy alone (a core the run did not need) are no evidence it was slowed."""
    d = f.disturbances
    took = "server_cpu_wait" in d or {"host_busy", "apparatus_cpu_wait"} <= d
    if not (f.below_ideal and took):
        return None
    return Finding(
        f"{words.others(f)}: below the ideal on a disturbed machine",
        {
            "others_on_server_cores_pct": others_on_server_cores(f.r),
            "others_on_cores": words.named_evidence(f.r.resources.others_on_cores),
        },
    )


def _waited_long(f: Facts) -> bool:
    return f.below_ideal and f.r.resources.server_wait_pct >= T.server_wait_named_pct


def cpu_taken(f: Facts) -> Finding | None:
    """The server waited for a CPU a third of the window or more, and processes outside the
    run used its cores: they are named (whatever the host's total said)."""
    if not (_waited_long(f) and f.r.resources.others_on_cores):
        return None
    return Finding(
        f"{words.waited(f.r.resources.server_wait_pct)}, while "
        f"{words.named(f.r.resources.others_on_cores)} ran where it could: they took its cores",
        {"others_on_cores": words.named_evidence(f.r.resources.others_on_cores)},
    )


def cpu_queued(f: Facts) -> Finding | None:
    """The server waited for a CPU a third of the window or more and no process outside the run
    was seen on its cores: its own processes and threads queued for them."""
    if not _waited_long(f) or f.r.resources.others_on_cores:
        return None
    return Finding(
        f"{words.waited(f.r.resources.server_wait_pct)}, using {f.r.resources.server_cpu_pct:.0f}% "
        f"of {words.cores(f.cap.cores)}, and no process outside the run used 10% of a core where "
        "it could run: its own processes and threads queued for its cores"
    )
