"""One step on N generator processes: the schedule (open loop) or the users (closed loop) each one
runs, their figures merged.

Why a split and not N copies: the union of the N schedules must be the arrival process asked for.
Poisson arrivals at R/N on N independent streams (distinct seeds) add up to Poisson arrivals at R
(the superposition of independent Poisson processes). Constant spacing at R/N on each, generator i
starting i/R after the common start, interleaves into arrivals exactly 1/R apart. Every schedule
counts from the same wall-clock instant (`begin_at`), which generators on one machine share to the
microsecond and generators on several share to their clocks' agreement (NTP: about a millisecond).

The cap on requests in flight is shared out too, so the N generators together never hold more
than the step's cap. Each generator reports its own counts; they add up exactly (`merge`), the
achieved rates add (the streams run side by side over the same window), and the youngest request
left unanswered anywhere marks where the merged percentiles become lower bounds. A closed-loop
step's users are shared out the same way (`share_out`), each generator timing the same window.

Plain data, HdrHistogram and the standard library: the lab may import this without gevent.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from lab.record import hist
from loadgen.protocol import ARRIVALS, OpenLoopFigures, Start

SEED_STRIDE = 1_000_003  # generator i of a seeded step draws from seed x this + i


def intended_offsets(
    rate: float, arrival: str, rng: random.Random, offset: float = 0.0
) -> Iterator[float]:
    """Seconds after the start at which each request is meant to begin; `offset` delays the
    first (one of several generators' interleaved constant schedules, `loadgen.shares`)."""
    if arrival not in ARRIVALS:
        raise ValueError(f"arrival must be one of {ARRIVALS}, got {arrival!r}")
    t, i = offset, 0
    while True:
        if arrival == "poisson":
            t += rng.expovariate(rate)
            yield t
        else:
            yield offset + i / rate
            i += 1


def spread(total: int, n: int) -> list[int]:
    """`total` shared out over `n` as evenly as whole numbers allow (the first ones get more)."""
    return [total // n + (1 if i < total % n else 0) for i in range(n)]


def share_out(start: Start, n: int, begin_at: float) -> list[Start]:
    """A closed-loop step's users shared out over `n` generators, each timing the same window
    from `begin_at`."""
    alone = replace(start, generators=1, remote_generators=0, generator_cpus=(), n_stride=n)
    users = spread(start.users, n)
    return [
        replace(alone, users=k, begin_at=begin_at, n_index=i, user_base=sum(users[:i]))
        for i, k in enumerate(users)
    ]


def split(start: Start, n: int, begin_at: float) -> list[Start]:
    """The N schedules whose union is `start`'s arrival process, all beginning at `begin_at`."""
    if start.rate_rps is None or start.rate_rps <= 0:
        raise ValueError("an open-loop step needs rate_rps > 0 to be shared out")
    if n < 1 or start.max_outstanding < n:
        raise ValueError(
            f"max_outstanding {start.max_outstanding} cannot be shared by {n} generators: each "
            f"needs at least one request in flight (raise --max-outstanding or use fewer)"
        )
    rate = start.rate_rps
    caps = spread(start.max_outstanding, n)
    return [
        replace(
            start,
            rate_rps=rate / n,
            max_outstanding=caps[i],
            seed=None if start.seed is None else start.seed * SEED_STRIDE + i,
            offset_s=start.offset_s + (i / rate if start.arrival == "constant" else 0.0),
            begin_at=begin_at,
            generators=1,
            remote_generators=0,
            generator_cpus=(),
            n_index=i,
            n_stride=n,
            user_base=sum(caps[:i]),
        )
        for i in range(n)
    ]


@dataclass(frozen=True)
class ShareResult:
    """What one generator reports after its drain: its own figures (no latency: the master has
    its intervals), its send-to-answer histogram, and the youngest unanswered request's age."""

    figures: OpenLoopFigures
    service: str  # HdrHistogram, encoded
    floor_ms: float | None  # None: every request of its window answered
    all_floor_ms: float | None = None  # the shortest bound, unfinished or dropped (None: none)


def merge(
    rate: float,
    shares: Sequence[ShareResult],
    latency: Mapping[str, float],
    everything: Mapping[str, float] | None = None,
) -> OpenLoopFigures:
    """The step's open-loop figures from every generator's: counts added, rates added, the drain
    the longest, lower bounds from the youngest unanswered request of any generator (for
    `everything`, every request's latency: the shortest bound, dropped ones' too)."""
    figs = [s.figures for s in shares]
    floor = _least(s.floor_ms for s in shares)
    all_floor = _least(s.all_floor_ms for s in shares)
    service = hist.merge(hist.decode(s.service) for s in shares)
    return OpenLoopFigures(
        rate_rps=rate,
        achieved_rate_rps=round(sum(f.achieved_rate_rps for f in figs), 2),
        sent=sum(f.sent for f in figs),
        dropped=sum(f.dropped for f in figs),
        unfinished=sum(f.unfinished for f in figs),
        service_latency_ms=hist.summary_ms(service),
        scheduled=sum(f.scheduled for f in figs),
        completed=sum(f.completed for f in figs),
        not_sent=sum(f.not_sent for f in figs),
        ok_in_window=sum(f.ok_in_window for f in figs),
        drain_s=max((f.drain_s for f in figs), default=0.0),
        lower_bounds=lower_bounds(latency, floor),
        all_lower_bounds=lower_bounds(everything or {}, all_floor),
    )


@dataclass(frozen=True)
class ClosedShare:
    """What one closed-loop generator knows after its drain, beside its intervals: the window's
    requests it left unanswered, the answers that arrived inside the window, its drain."""

    unfinished: int
    ok_in_window: int
    drain_s: float
    floor_ms: float | None  # the youngest unfinished request's age (None: none unfinished)


def closed_figures(
    shares: Sequence[ClosedShare], latency: Mapping[str, float], everything: Mapping[str, float]
) -> dict[str, Any]:
    """A closed-loop step's cut-off figures (`Done.closed_loop`) from every generator's, one or
    several: counts added, the drain the longest, lower bounds from the youngest unanswered
    request of any generator (a closed loop drops nothing: one floor for both latencies)."""
    floor = _least(s.floor_ms for s in shares)
    return {
        "unfinished": sum(s.unfinished for s in shares),
        "ok_in_window": sum(s.ok_in_window for s in shares),
        "drain_s": round(max((s.drain_s for s in shares), default=0.0), 3),
        "lower_bounds": lower_bounds(latency, floor),
        "all_lower_bounds": lower_bounds(everything, floor),
    }


def _least(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return min(known) if known else None


def lower_bounds(latency: Mapping[str, float], floor_ms: float | None) -> tuple[str, ...]:
    """The latency keys at or past the youngest unanswered request's age: lower bounds (">="),
    and the mean, which every bound pulls down."""
    if floor_ms is None:
        return ()
    return tuple(k for k, v in latency.items() if v >= floor_ms or k == "mean")
