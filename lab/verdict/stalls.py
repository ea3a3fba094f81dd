"""The stall rules: the server stopped answering, for whole seconds (`stalled`) or for a
fraction of a second or more, seen per 100 ms (`paused`). Apart from `lab.verdict.rules` so that
each module stays one screenful; the table (`lab.verdict.table`) orders them with the rest.
"""

from __future__ import annotations

from lab.verdict.clusters import cluster_of
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
        f"{', '.join(str(i) for i in numbered)}: {', '.join(f'{x:g}' for x in answered)} answers a "
        f"second against a median of {median:g}) while requests waited: a pause, a lock, a "
        "restarted worker?",
        {
            "seconds": list(f.outage),
            "numbered": numbered,
            "count": n,
            "answers_per_s": answered,
            "median_per_s": median,
        },
    )


def paused(f: Facts) -> Finding | None:
    """The server stopped answering for a fraction of a second or more, seen per 100 ms or from
    the requests held through it (`lab.verdict.pauses`): how often, how long and how regularly,
    so a pause is named at the scale it happens. Its p99 is the model's own (the held requests
    are counted), so compared."""
    if not f.pauses:
        return None
    lengths = [p.length_ms for p in f.pauses]
    every = period_s(f.pauses)
    n, least = len(lengths), least_pause_ms(f.cap.delay_ms)
    starts = [p.start_s for p in f.pauses if p.start_s is not None]
    regular = f", about every {every:g} s" if every is not None else ""
    window = f"{f.r.duration_s:g} s window"
    at = f"at {', '.join(f'{s:g}' for s in starts)} s of the {window}, " if starts else ""
    seen, held = _seen(f, least)
    return Finding(
        f"the server stopped answering {n} time{'s' if n != 1 else ''} for {max(lengths):g} ms at "
        f"the longest{regular} ({at}{seen}; a pause counts from {least:g} ms): a GC, a lock, a "
        "blocking call in an event loop?",
        {
            "count": n,
            "lengths_ms": lengths,
            "starts_s": starts,
            "period_s": every,
            "least_ms": least,
            "tick_ms": TICK_MS,
            **held,
        },
    )


def _seen(f: Facts, least: float) -> tuple[str, dict[str, float]]:
    """How the pauses were seen, in words and figures: per 100 ms, or (the bins too thin) from
    the requests held through them, far above the rest."""
    c = cluster_of(f.r.load.answers_by_latency, least)
    if c is None or any(p.seen == "bins" for p in f.pauses):
        return f"seen per {TICK_MS:g} ms", {}
    words = (
        f"{c.count} request{'s' if c.count != 1 else ''} held {c.least_ms:g} ms or more, the rest "
        f"{c.bulk_ms:g} ms at most; too few answers per {TICK_MS:g} ms to see it there"
    )
    figures = {"held": c.count, "held_least_ms": c.least_ms, "rest_most_ms": c.bulk_ms}
    return words, figures
