"""When nginx in front, not the model behind it, limited a step: a rule of the verdict table.

A pure function of the step record (`lab.run.limits` names it `front`): nginx's error log said it
ran out during the window (flag `front_limited`: worker_connections are not enough, the server
unreachable or late), or its CPU was full: its workers' own cores, or the cores it shares with
the server, with the front using more of them than the server did.
"""

from __future__ import annotations

from lab.record.step import StepRecord


def reason(r: StepRecord, cores: float, workers: int, saturated: float) -> str:
    """The front's limit in words with its figures, or "" when it did not limit the step (or
    there was no front). `cores`: the cores nginx shares with the server; `saturated`: the share
    of a core's time that counts as full."""
    if r.front_cpu_pct < 0:
        return ""
    if "front_limited" in r.flags:
        return f"nginx's error log: {r.evidence.get('front_limited')}"
    own = r.front_cpu_pct >= saturated * 100 * max(workers, 1)
    shared = r.server_cpu_pct + r.front_cpu_pct >= saturated * 100 * cores
    if not (own or (shared and r.front_cpu_pct >= r.server_cpu_pct)):
        return ""
    named = f"{workers} worker" + ("s" if workers != 1 else "")
    return (
        f"nginx in front used {r.front_cpu_pct:.0f}% CPU ({named}) beside the server's "
        f"{r.server_cpu_pct:.0f}% on {cores:g} core{'s' if cores != 1 else ''}: the front, not "
        "the model, ran out; more nginx workers, or cores for the front"
    )
