"""The lab page's flags, raised live from one model's last seconds: the sweep's rules, live.

The thresholds are the verdict's own (`lab.record.thresholds`), so a flag on the page means what
the same flag means in a run's summary:

- serialized: at least `live_probe_users` users but about one request per delay: requests do not
  overlap (late monkey-patching, a blocking call in an event loop); never a fair result.
- capped: the verdict's plateau seen from outside, live: requests in flight by Little's law
  (rps x d) at most `plateau_share` of the users while the server's CPU is under
  `server_cpu_idle_share` of a core: a pool, not the CPU, holds the model back; never beside
  client_saturated (as in the verdict's rules, a saturated generator's own queue is not a cap).
- server_saturated: the server's CPU at `server_cpu_saturated_share` of one core or more.
- client_saturated: locust's own CPU at `generator_cpu_saturated_pct` or more: the figures may be
  the client's limit.
"""

from __future__ import annotations

from dataclasses import dataclass

from lab.record.thresholds import T


@dataclass(frozen=True)
class Live:
    """One model's live figures; cpu values are None where they cannot be measured."""

    users: int
    rps: float
    ideal_rps: float  # users / mean delay; 0 when there is no ideal (CPU route)
    server_cpu_pct: float | None
    client_cpu_pct: float | None


def flags(live: Live) -> dict[str, str]:
    """Flag name -> the evidence, in words, for a model's live figures."""
    out: dict[str, str] = {}
    one_at_a_time = live.ideal_rps / live.users if live.users else 0.0
    serial = T.live_serial_factor * one_at_a_time
    if live.users >= T.live_probe_users and one_at_a_time and live.rps <= serial:
        out["serialized"] = f"{live.rps} rps with {live.users} users: one request per delay"
    if live.client_cpu_pct is not None and live.client_cpu_pct >= T.generator_cpu_saturated_pct:
        out["client_saturated"] = f"locust CPU {live.client_cpu_pct}%"
    cpu = live.server_cpu_pct
    if cpu is not None and cpu >= T.server_cpu_saturated_share * 100:
        out["server_saturated"] = f"server CPU {cpu}%"
    elif _plateau(live) and not {"serialized", "client_saturated"} & out.keys():
        where = f" with server CPU {cpu}%" if cpu is not None else ""
        out["capped"] = f"{live.rps} of ideal {live.ideal_rps:g} rps{where}"
    return out


def _plateau(live: Live) -> bool:
    """In flight by Little's law (rps x d) at most the plateau share of the users, with the
    server's CPU (where known) under the idle share of a core."""
    idle = live.server_cpu_pct is None or live.server_cpu_pct < T.server_cpu_idle_share * 100
    return bool(live.ideal_rps) and live.rps < T.plateau_share * live.ideal_rps and idle
