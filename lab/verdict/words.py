"""The apparatus's figures in words, for the rules' reasons (what it was, not what to do)."""

from __future__ import annotations

from lab.verdict.facts import Facts, others_on_server_cores


def what_saturated(f: Facts) -> str:
    """The apparatus's saturation or lateness in words, with its figures."""
    r = f.r
    parts = []
    if "generator_saturated" in f.disturbances:
        parts.append(f"the load generators at {r.resources.client_cpu_pct:.0f}% of a core")
    if "apparatus_core" in f.disturbances:
        ev = r.evidence.details.get("apparatus_saturated")
        ev = ev if isinstance(ev, dict) else {}
        parts.append(
            f"a core the apparatus ran on was {ev.get('core_busy_pct', '?')}% busy (generator "
            f"{r.resources.client_cpu_pct:.0f}%, upstream {r.resources.upstream_cpu_pct:.0f}% of a "
            f"core; their threads waited for a CPU {ev.get('waited_for_cpu_pct', '?')}% of the "
            "window, summed over them)"
        )
    if "upstream_late" in f.disturbances:
        parts.append(
            f"the upstream's event loop woke {r.evidence.upstream_lag_ms:g} ms late on average"
        )
    if "generator_late" in f.disturbances:
        parts.append(f"the generator's loop woke late ({_lag(f)})")
    return "; ".join(parts) or "the apparatus"


def _lag(f: Facts) -> str:
    lag = f.r.evidence.generator_lag_ms
    return f"p99 {lag.get('p99', 0.0):g} ms, max {lag.get('max', 0.0):g} ms"


def closing(f: Facts) -> str:
    """A server that closed a connection per request, and what that cost, in words."""
    r = f.r
    waiting = (
        f", {r.load.server_time_wait:,} sockets in TIME_WAIT" if r.load.server_time_wait > 0 else ""
    )
    return (
        f"the server closes each connection after its response ({f.conns_per_request or 0:.2f} TCP "
        f"connections closed per request{waiting}), so every request pays a connect, an accept and "
        f"a close in the generators and the kernel (softirq {r.resources.host_softirq_pct:.0f}% of "
        "a core)"
    )


def host_full(f: Facts) -> str:
    return f"the host's {f.cap.host_cores} cores were all busy ({f.r.resources.host_cpu_pct:.0f}%)"


def others(f: Facts) -> str:
    """What took the CPU besides the run, in words."""
    r = f.r
    parts = []
    if "host_busy" in f.disturbances:
        parts.append(
            str(r.evidence.details.get("host_busy") or "other processes used a core's share")
        )
    if "server_cpu_wait" in f.disturbances and r.resources.others_on_cores:
        parts.append(f"on its cores: {named(r.resources.others_on_cores)}")
    if "server_cpu_wait" in f.disturbances and (beside := others_on_server_cores(r)) > 0:
        parts.append(f"{beside:.0f}% of a core ran on the server's own cores besides it")
    if "server_cpu_wait" in f.disturbances:
        parts.append(
            f"{waited(r.resources.server_wait_pct)}, while using {r.resources.server_cpu_pct:.0f}% "
            f"of {cores(f.cap.cores)}"
        )
    return "; ".join(parts)


def waited(pct: float) -> str:
    """The server's wait for a CPU as /proc/PID/task/*/schedstat counts it: the waits of its
    busiest process's threads added up, as a share of the window's length. Several threads
    waiting at once add up past 100% (a share of the window, never "of the time")."""
    return f"the server's threads waited for a CPU {pct:.0f}% of the window, summed over them"


def named(others: dict[str, float]) -> str:
    """Processes outside the run by name, pid and CPU: "stress (41) 98%, yes (42) 97% of a
    core"."""
    return ", ".join(f"{who} {pct:.0f}%" for who, pct in others.items()) + " of a core"


def named_evidence(others: dict[str, float]) -> list[dict[str, object]]:
    """The processes `named` quotes, as evidence: each one's name and pid, and its CPU."""
    return [{"process": who, "cpu_pct": pct} for who, pct in others.items()]


def cores(n: float) -> str:
    return f"{n:g} core" + ("s" if n != 1 else "")


def two_digits(x: float) -> float:
    """`x` to two significant digits, as a reason prints it (never in an exponent)."""
    return float(f"{x:.2g}")
