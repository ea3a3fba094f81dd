"""Every request counted: what failed, dropped and unfinished requests and the generator's own
stalls do to a step's percentiles, as facts on the step record.

Why per request: a percentile is a share of requests. p99 over the answers alone lets a server
that answers its slowest requests with a fast 503 (or a cap that drops them) look faster, so the
step keeps the share of requests that are not answers and which percentiles that share could
move (the verdict's rule table raises `failed_tail` from it). Likewise the generator's stalls:
a stall delays every answer that arrives and every send that falls due during it, so the step
keeps, for each reported
percentile, the share of requests the generator delayed by at least that percentile's error
budget, and which percentiles that share could move (`generator_lag`): the lag's own p99 against
a fixed floor says neither, and p99.9 and max were never checked.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lab.record import hist
from lab.record.thresholds import T

# The share of requests each percentile leaves above it: more requests than this failing,
# dropped or unfinished (or delayed by a stall) can set the percentile on their own. "max": any.
ABSORBS = {"p99": T.errors_share, "p999": T.errors_share / 10, "max": 0.0}


def unanswered_share(requests: int, ok: int, dropped: int) -> float:
    """Failed, dropped and unfinished requests as a share of every request (0 when none)."""
    total = requests + dropped
    return round((total - ok) / total, 6) if total > 0 else 0.0


def hides_p99(share: float) -> bool:
    """More requests unanswered than the p99 leaves beyond it: the one test of `failed_tail`
    (the verdict's rule `errors`) and of `unanswered_hides`, so they agree at exactly 1%."""
    return share > ABSORBS["p99"]


def hidden_by(share: float) -> tuple[str, ...]:
    """The percentiles a share of unanswered requests can set on its own: p99 over the answers
    alone would hide them, so the step is never compared on those (the max never is: any one
    failure can be the slowest request)."""
    return tuple(k for k, absorbs in ABSORBS.items() if k != "max" and share > absorbs)


def touched_shares(
    stalls: tuple[str, str], requests: int, latency: Mapping[str, float]
) -> dict[str, float]:
    """For each reported percentile, the share of requests the generator itself delayed by at
    least its error budget (T.generator_lag_p99_share of it, T.generator_touch_floor_ms at
    least). `stalls`: the generators' loop lag over the window and open-loop sends' lateness
    (encoded; "": unknown lag, {} returned; no late sends). An answer arriving while the loop is
    X late waits X more, so the share of the time the loop was that late is the share of answers
    so delayed; each send that left late is counted itself. Both added: a request may be
    counted twice, never missed."""
    lag, late = stalls
    if not lag or requests <= 0:
        return {}
    lag_at, lag_counts = hist.bins(hist.decode(lag))
    late_at, late_counts = hist.bins(hist.decode(late)) if late else (lag_at[:0], lag_counts[:0])
    ticks = max(float(lag_counts.sum()), 1.0)
    out = {}
    for key in ABSORBS:
        budget_us = 1000 * max(
            T.generator_touch_floor_ms, T.generator_lag_p99_share * latency.get(key, 0.0)
        )
        answers = float(lag_counts[lag_at >= budget_us].sum()) / ticks
        sends = float(late_counts[late_at >= budget_us].sum()) / requests
        out[key] = round(min(1.0, answers + sends), 6)
    return out


def moved_by_stalls(shares: Mapping[str, float]) -> tuple[str, ...]:
    """The percentiles the generator's stalls touched enough requests to move past the budget."""
    return tuple(k for k, share in shares.items() if share > ABSORBS[k])


def facts(
    counts: tuple[int, int, int],
    latency: Mapping[str, float],
    every: Mapping[str, float],
    failed: Mapping[str, Mapping[str, float]],
    stalls: tuple[str, str],
    open_loop: Mapping[str, Any],
) -> dict[str, Any]:
    """The step record's every-request fields. `counts`: requests (open loop: unfinished
    included), ok, dropped; `every`: latency over every request ({}: not recorded, an older
    generator or a UI segment); `stalls`: see `touched_shares`."""
    requests, ok, dropped = counts
    share = unanswered_share(requests, ok, dropped)
    shares = touched_shares(stalls, requests + dropped, latency)
    return {
        "latency_all_ms": dict(every),
        "latency_all_lower_bounds": tuple(open_loop.get("all_lower_bounds") or ()),
        "failed_latency_ms": {k: dict(v) for k, v in failed.items()},
        "unanswered_share": share,
        "unanswered_hides": hidden_by(share) if ok else (),
        "generator_touched": shares,
        "generator_moved": moved_by_stalls(shares),
        "send_lateness_ms": dict(open_loop.get("send_lateness_ms") or {}),
    }
