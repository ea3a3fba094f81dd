"""The lab page's flags, raised live from one model's last seconds (the sweep's rules, live).

- serialized: at least PROBE_USERS users but about one request per delay: requests do not overlap
  (late monkey-patching, a blocking call in an event loop); never a fair result.
- capped: under CAPPED_EFFICIENCY of the ideal while the server's CPU is below SATURATED_PCT: a
  concurrency limit (threads, greenlets, listen queue), not the CPU, holds the model back.
- server_saturated: the server's CPU is at SATURATED_PCT of one core or more.
- client_saturated: locust's own CPU is that high: the figures may be the client's limit.
"""

from __future__ import annotations

from dataclasses import dataclass

PROBE_USERS = 4
SERIAL_FACTOR = 1.5  # rps at most this many times one request per delay: serialised
CAPPED_EFFICIENCY = 0.7
SATURATED_PCT = 90.0


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
    if live.users >= PROBE_USERS and one_at_a_time and live.rps <= SERIAL_FACTOR * one_at_a_time:
        out["serialized"] = f"{live.rps} rps with {live.users} users: one request per delay"
    cpu = live.server_cpu_pct
    if cpu is not None and cpu >= SATURATED_PCT:
        out["server_saturated"] = f"server CPU {cpu}%"
    elif (
        live.ideal_rps and live.rps < CAPPED_EFFICIENCY * live.ideal_rps and "serialized" not in out
    ):
        where = f" with server CPU {cpu}%" if cpu is not None else ""
        out["capped"] = f"{live.rps} of ideal {live.ideal_rps:g} rps{where}"
    if live.client_cpu_pct is not None and live.client_cpu_pct >= SATURATED_PCT:
        out["client_saturated"] = f"locust CPU {live.client_cpu_pct}%"
    return out
