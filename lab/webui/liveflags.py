"""The lab page's flags, raised live from one model's last seconds by the sweep's own rule table.

The page builds a step record from a model's live figures (its throughput and p50 over the last
seconds, its server's CPU over the server's cores, the upstream's own loop lag, locust's CPU)
and runs the verdict's ordered table on it (`lab.verdict.assess`), so a flag on the page means
what the same flag means in a run's summary, and the page looks at the upstream and the host
before it blames a model: an upstream whose loop woke late is named for every model it delayed,
none of them "capped". What only the page observes are the two flags it raises itself before the
table runs, as a sweep's steps do:

- serialized: at least `live_probe_users` users but about one request per delay: requests do not
  overlap (late monkey-patching, a blocking call in an event loop); never a fair result.
- client_saturated: locust's own CPU at `generator_cpu_saturated_pct` or more.

The table's verdict is then shown in the page's words: `capped` where a pool held the model
back (the page does not know the knobs, so a cap is a cap, explained or not), `server_saturated`
where the server's CPU was the limit (at `server_cpu_saturated_share` of its cores, or busy
enough that requests queued for it), and the table's other flags (`lab_limited` with the limit
named, `failed_tail`, `stalled`) as they are.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from lab.record.step import Measured, Raised, Sampled, StepKey, StepRecord, step_record
from lab.record.thresholds import T
from lab.verdict.assess import assessed
from lab.verdict.capacity import Capacity, server_cores

SERVER_CORES_ENV = "LAB_SERVER_CORES"  # the cores each model's server can use (`lab ui` sets it)
UNKNOWN_KNOBS = 1_000_000  # the page does not know a model's knobs: no knob explains a cap
_IN_WORDS = {"capped_unexplained": "capped", "capped": "capped"}


@dataclass(frozen=True)
class Live:
    """One model's live figures; cpu values are None where they cannot be measured."""

    users: int
    rps: float
    ideal_rps: float  # users / mean delay; 0 when there is no ideal (CPU route)
    server_cpu_pct: float | None  # None: no meter, read as idle (a cap is still shown)
    client_cpu_pct: float | None
    server_cores: float = 1.0  # the cores the server can use (`lab.verdict.capacity`)
    p50_ms: float | None = None  # over the last seconds (None: not known)
    errors_per_s: float = 0.0
    # The upstream's own /stats (`servers.upstream_state`): its loop's lateness, mean and max.
    upstream: Mapping[str, float] = field(default_factory=dict)


def cores_env(cores_given: int, processes: int) -> dict[str, str]:
    """The page's environment naming the servers' cores, as the sweep's verdict counts them."""
    return {SERVER_CORES_ENV: f"{server_cores(cores_given, processes):g}"}


def flags(live: Live) -> dict[str, str]:
    """Flag name -> the evidence, in words, for a model's live figures."""
    observed = _observed(live)
    record = live_record(live, observed)
    out = {r.flag: str(r.evidence) for r in observed}
    for name in record.evidence.flags:
        if name in _IN_WORDS:
            out[_IN_WORDS[name]] = _cap_words(record.evidence.details.get(name))
        elif name == "lab_limited":
            out[name] = f"{record.evidence.limited_by}: {record.evidence.limit_reason}"
        elif name in ("failed_tail", "stalled"):
            out[name] = record.evidence.limit_reason if record.evidence.limit_rule == name else name
    if record.evidence.limited_by == "server_cpu":
        out["server_saturated"] = record.evidence.limit_reason
    return out


def _cap_words(evidence: object) -> str:
    """The plateau's evidence in the page's words (the page knows no knobs to name)."""
    if not isinstance(evidence, dict):
        return str(evidence)
    return (
        f"about {evidence.get('ceiling')} of {evidence.get('offered')} requests in flight "
        f"({evidence.get('seen_by')}); {evidence.get('queueing')}"
    )


def _observed(live: Live) -> tuple[Raised, ...]:
    """What the page sees itself, as a sweep's step raises it before its verdict."""
    out = []
    one_at_a_time = live.ideal_rps / live.users if live.users else 0.0
    serial = T.live_serial_factor * one_at_a_time
    if live.users >= T.live_probe_users and one_at_a_time and live.rps <= serial:
        out.append(Raised("serialized", f"{live.rps} rps with {live.users} users: one per delay"))
    if live.client_cpu_pct is not None and live.client_cpu_pct >= T.generator_cpu_saturated_pct:
        out.append(Raised("client_saturated", f"locust CPU {live.client_cpu_pct}%"))
    return tuple(out)


def live_record(live: Live, observed: tuple[Raised, ...] = ()) -> StepRecord:
    """A one-second step record of the live figures, assessed by the sweep's rule table."""
    delay_ms = 1000 * live.users / live.ideal_rps if live.ideal_rps and live.users else 0.0
    p50 = live.p50_ms
    if p50 is None or p50 != p50:  # not known: the mean by Little's law, users / throughput
        p50 = 1000 * live.users / live.rps if live.rps > 0 else 0.0
    failed = round(live.errors_per_s)
    measured = Measured(
        started_at="",
        duration_s=1.0,
        requests=round(live.rps) + failed,
        ok=round(live.rps),
        errors={"http_5xx": failed} if failed else {},
        latency_ms={"p50": p50},
        client_cpu_pct=live.client_cpu_pct or 0.0,
    )
    sampled = Sampled(
        server_cpu_pct=live.server_cpu_pct or 0.0,
        upstream_max_inflight=-1,  # one upstream serves every model on the page: not this one's
        upstream_lag_ms=float(live.upstream.get("loop_lag_mean_ms", -1.0)),
        upstream_lag_max_ms=float(live.upstream.get("loop_lag_max_ms", -1.0)),
    )
    key = StepKey("live", "closed", live.users, None, 1)
    record = step_record("live", key, measured, sampled, observed)
    cap = Capacity(UNKNOWN_KNOBS, "knobs not known to the page", live.server_cores, delay_ms, 0.0)
    return assessed(record, cap)
