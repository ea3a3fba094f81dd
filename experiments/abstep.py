"""One step record from an ab-style client run (`experiments.abclient`'s JSON result).

Why: the ab-style reproductions (mixpanel, uwsgi-blog) measure a fixed number of requests rather
than a duration, but their steps go into `steps.jsonl` like a sweep's so that `lab report` reads
them. Requests not finished by the deadline count as timeouts there.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from lab.results import ERROR_KINDS, Step


def ab_errors(r: dict[str, Any]) -> dict[str, int]:
    """The client's errors by kind, with unfinished requests counted as timeouts."""
    errors = {k: v for k, v in r["errors"].items() if k in ERROR_KINDS}
    if r["unfinished"]:
        errors["timeout"] = errors.get("timeout", 0) + r["unfinished"]
    return errors


def ab_step(
    run_id: str,
    model: str,
    c: int,
    trial: int,
    r: dict[str, Any],
    histogram: str,
    evidence: dict[str, Any],
    server: tuple[float, float] = (0.0, 0.0),
    client_saturated: bool = False,
) -> Step:
    """`server` is (CPU %, RSS MB) where measured; flags `errors` and `client_saturated`."""
    errors = ab_errors(r)
    flags = (["errors"] if errors else []) + (["client_saturated"] if client_saturated else [])
    return Step(
        run_id=run_id,
        model=model,
        mode="closed",
        concurrency=c,
        trial=trial,
        started_at=datetime.fromtimestamp(r["started_at"], UTC).isoformat(timespec="seconds"),
        duration_s=r["time_taken_s"],
        requests=r["n"],
        ok=r["ok"],
        errors=errors,
        throughput_rps=r["throughput_rps"],
        latency_ms=r["latency_ms"],
        server_cpu_pct=round(server[0], 1),
        server_rss_mb=round(server[1], 1),
        client_cpu_pct=round(r["client_cpu_pct"], 1),
        upstream_max_inflight=0,
        flags=flags,
        histogram=histogram,
        evidence={**evidence, "deadline_hit": r["deadline_hit"]},
    )
