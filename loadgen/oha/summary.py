"""One oha step's record from its tallies (`loadgen.oha.figures`): the latency figures, the open-
or closed-loop figures, the per-second series and each process's part, exactly the `Done` the
lab's own loops send, so the step record, the verdict and the report read either engine alike.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from lab.record import hist
from loadgen.oha.figures import OhaRun, Spec, Tally, merged, tally
from loadgen.protocol import Done, OpenLoopFigures, Part
from loadgen.shares import lower_bounds


def figures(t: Tally, spec: Spec) -> tuple[dict[str, Any], OpenLoopFigures]:
    """The step's latency figures (as `Done` takes them) and its open-loop figures."""
    whole = hist.merge([*t.seconds, t.drain])
    everything = hist.merge([whole, *t.failed.values()])
    latency = hist.summary_ms(whole)
    all_latency = hist.summary_ms(everything)
    c = t.counts
    open_loop = OpenLoopFigures(
        rate_rps=spec.rate_rps,
        achieved_rate_rps=round(t.achieved_rps, 2),
        sent=c["sent"],
        dropped=c["dropped"],
        unfinished=c["unfinished"],
        service_latency_ms=hist.summary_ms(t.service),
        scheduled=c["sent"] + c["dropped"],
        completed=c["completed"],
        not_sent=c["dropped"],
        ok_in_window=c["ok_in_window"],
        drain_s=round(t.drain_s, 3),
        lower_bounds=lower_bounds(latency, t.floor),
        all_lower_bounds=lower_bounds(all_latency, t.all_floor),
        send_lateness_ms=hist.summary_ms(t.late),
    )
    failed = {k: hist.summary_ms(h) for k, h in sorted(t.failed.items())}
    late = hist.encode(t.late) if t.late.get_total_count() else ""
    return {
        "latency_ms": latency,
        "failed_latency_ms": failed,
        "all_latency_ms": all_latency,
        "late_sends": late,
    }, open_loop


def series(t: Tally, window_s: float, cpu: Sequence[float]) -> dict[str, list[float]]:
    """The per-second series as the lab's open loop keeps them (no loop-lag series: oha has no
    probe of its own runtime's lateness)."""
    n = len(t.seconds)
    ends = [min(i + 1.0, window_s) for i in range(n)]
    spans = [max(e - float(i), 1e-9) for i, e in enumerate(ends)]
    summaries = [hist.summary_ms(h) if h.get_total_count() else None for h in t.seconds]
    nan = math.nan
    return {
        "t": [round(e, 2) for e in ends],
        "rps": [round(a / s, 1) for a, s in zip(t.answers, spans, strict=True)],
        "errors": [float(e) for e in t.errors_per_s],
        "p50_ms": [s["p50"] if s else nan for s in summaries],
        "p99_ms": [s["p99"] if s else nan for s in summaries],
        "client_cpu_pct": [float(cpu[i]) if i < len(cpu) else 0.0 for i in range(n)],
    }


def open_series(t: Tally) -> dict[str, list[float]]:
    """The open loop's own series: oha drops only at the deadline (its queue, in the counts)."""
    return {"dropped": [0.0] * len(t.seconds), "inflight": [float(x) for x in t.inflight]}


def closed_loop(t: Tally, latency: dict[str, Any]) -> dict[str, Any]:
    """A closed-loop step's cut-off figures (`Done.closed_loop`), as `loadgen.shares` makes them;
    oha's only-counted failures are lower bounds too (`all_lower_bounds`)."""
    return {
        "unfinished": t.counts["unfinished"],
        "ok_in_window": t.counts["ok_in_window"],
        "drain_s": round(t.drain_s, 3),
        "reconnects": t.counts["reconnects"],
        "lower_bounds": lower_bounds(latency["latency_ms"], t.floor),
        "all_lower_bounds": lower_bounds(latency["all_latency_ms"], t.all_floor),
    }


# A remote generator's share (`loadgen.oha.remote`): a part of its own even where it is the only
# one, since its CPU is another machine's.
REMOTE = "remote-"


def part(run: OhaRun, t: Tally, spec: Spec) -> Part:
    """One oha process's share of a step run by several, or by one elsewhere."""
    _, open_loop = figures(t, replace(spec, rate_rps=spec.rate_rps_of(run)))
    c = t.counts
    own = None if spec.closed else vars(open_loop)
    return Part(run.source, c["requests"], c["ok"], run.cpu_pct, list(run.cpus), {}, -1.0, own)


def done(
    runs: Sequence[OhaRun], spec: Spec, started_at: str, cpu: Sequence[float]
) -> tuple[Done, Tally]:
    """The step's figures from every oha process's window, and their merged tally (its
    intervals are the `.hlog`'s)."""
    tallies = [tally(r, spec) for r in runs]
    t = merged(tallies)
    latency, open_loop = figures(t, spec)
    c = t.counts
    mean_cpu = sum(cpu) / len(cpu) if cpu else sum(r.cpu_pct for r in runs)
    parts = [part(r, x, spec) for r, x in zip(runs, tallies, strict=True)]
    loop: dict[str, Any] = {"open_loop": open_loop}
    timeseries = series(t, spec.window_s, cpu)
    if spec.closed:  # no schedule: nothing sent late, nothing dropped
        loop = {"closed_loop": closed_loop(t, latency)}
        latency = {**latency, "late_sends": ""}
    else:
        timeseries.update(open_series(t))
    return Done(
        started_at=started_at,
        duration_s=spec.window_s,
        requests=c["requests"],
        ok=c["ok"],
        errors=dict(t.errors),
        client_cpu_pct=round(mean_cpu, 1),
        timeseries=timeseries,
        answers_100ms=list(t.ticks),
        parts=parts if len(runs) > 1 or any(r.source.startswith(REMOTE) for r in runs) else [],
        **loop,
        **latency,
    ), t
