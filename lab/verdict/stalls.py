"""The stall rules: the server stopped answering, for whole seconds (`stalled`) or for a
fraction of a second or more, seen per 100 ms (`paused`). Apart from `lab.verdict.rules` so that
each module stays one screenful; the table (`lab.verdict.table`) orders them with the rest.
"""

from __future__ import annotations

from lab.verdict.facts import Facts, median_rps
from lab.verdict.pauses import TICK_MS, least_pause_ms, period_s
from lab.verdict.rules import Finding


def stalled(f: Facts) -> Finding | None:
    """Seconds with almost no answers while requests waited: an outage the step's means hide
    (its throughput averages over it, its p99 of the answers may leave the waiting requests
    out). The tail is not compared; the throughput is, its per-second interval without those
    seconds (they are the event, not noise: `lab.record.step.StepRecord.outage_seconds`)."""
    if not f.outage:
        return None
    series = f.r.timeseries.get("rps") or []
    answered = [series[i] for i in f.outage]
    median = median_rps(f.r)
    n, numbered = len(f.outage), [i + 1 for i in f.outage]  # the window's seconds from 1
    return Finding(
        f"the server almost stopped answering for {n} second{'s' if n != 1 else ''} of the "
        f"{f.r.duration_s:g} s window (second{'s' if n != 1 else ''} "
        f"{', '.join(str(i) for i in numbered)}: {', '.join(f'{x:g}' for x in answered)} "
        f"answers a second against a median of {median:g}) while requests waited: a pause, a "
        "lock, a restarted worker?",
        {
            "seconds": list(f.outage),
            "numbered": numbered,
            "count": n,
            "answers_per_s": answered,
            "median_per_s": median,
        },
    )


def paused(f: Facts) -> Finding | None:
    """The server stopped answering for a fraction of a second or more, seen per 100 ms
    (`lab.verdict.pauses`): how often, how long and how regularly, so a pause is named at the
    scale it happens. Its p99 is the model's own (the held requests are counted), so compared."""
    if not f.pauses:
        return None
    lengths = [p.length_ms for p in f.pauses]
    every = period_s(f.pauses)
    n = len(lengths)
    regular = f", about every {every:g} s" if every is not None else ""
    return Finding(
        f"the server stopped answering {n} time{'s' if n != 1 else ''} for {max(lengths):g} ms "
        f"at the longest{regular} (at {', '.join(f'{p.start_s:g}' for p in f.pauses)} s of "
        f"the {f.r.duration_s:g} s window, seen per {TICK_MS:g} ms; a pause counts from "
        f"{least_pause_ms(f.cap.delay_ms):g} ms): a GC, a lock, a blocking call in an event "
        "loop?",
        {
            "count": n,
            "lengths_ms": lengths,
            "starts_s": [p.start_s for p in f.pauses],
            "period_s": every,
            "least_ms": least_pause_ms(f.cap.delay_ms),
            "tick_ms": TICK_MS,
        },
    )
