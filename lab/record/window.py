"""What one step's window yielded before it is a record: the generator's figures and the lab's
samples around it (`lab.record.step.step_record` makes the record from these two).

They live apart from the record so each is read in one sitting: the record is what readers
compare, these are what the run measured and sampled to make it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Measured:
    """What the load generator measured in the window (zeros when nothing was)."""

    started_at: str
    duration_s: float = 0.0
    requests: int = 0
    ok: int = 0
    errors: Mapping[str, int] = field(default_factory=dict)
    latency_ms: Mapping[str, float] = field(default_factory=dict)
    client_cpu_pct: float = 0.0
    timeseries: Mapping[str, list[float]] = field(default_factory=dict)
    open_loop: Mapping[str, Any] | None = None  # achieved rate, sent, dropped, unfinished, ...
    generator_lag_ms: Mapping[str, float] = field(default_factory=dict)
    generator_periodic_pct: float = -1.0
    all_latency_ms: Mapping[str, float] = field(default_factory=dict)  # every request's
    failed_latency_ms: Mapping[str, Mapping[str, float]] = field(default_factory=dict)  # by kind
    # The generators' error per request is read from these (encoded HdrHistograms; "": unknown):
    # their loop lag over the window, and open-loop sends' lateness (`lab.record.counted`).
    generator_lag: str = ""
    late_sends: str = ""
    # Closed loop counted by send (`loadgen.closed_loop`): unfinished, ok_in_window, drain_s,
    # lower_bounds, all_lower_bounds ({}: counted by the clock).
    closed_loop: Mapping[str, Any] = field(default_factory=dict)
    routes: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # a mix: per route
    answers_100ms: tuple[int, ...] = ()  # the window's answers per 100 ms (`Done.answers_100ms`)
    answers_by_latency: tuple[tuple[float, int], ...] = ()  # `Done.answers_by_latency`


@dataclass(frozen=True)
class Sampled:
    """What the lab sampled around the generator during the window."""

    server_cpu_pct: float = 0.0
    server_rss_mb: float = 0.0
    server_pss_mb: float = 0.0
    upstream_cpu_pct: float = 0.0
    host_cpu_pct: float = 0.0
    # The lab's own process and all it started (server, generators, upstream, front, the app's
    # databases, its samplers' commands), over the same seconds as `host_cpu_pct` (-1: not
    # accounted, an older record): what is left, less softirq, is other processes'.
    run_cpu_pct: float = -1.0
    upstream_max_inflight: int = 0
    upstream_served: int = -1  # requests the upstream answered in the window (-1: unknown)
    server_connections: int = -1  # TCP connections to the server closed in the window (-1: unknown)
    server_time_wait: int = -1  # sockets in TIME_WAIT on the server's port at its end
    apparatus_core_pct: float = 0.0  # the busiest core the generator or upstream ran on
    host_softirq_pct: float = 0.0  # kernel softirq work (network), charged to no process
    apparatus_wait_pct: float = 0.0  # generator + upstream: time runnable but waiting for a CPU
    server_wait_pct: float = 0.0  # the server's processes: the most any waited for a CPU, %
    # The server's own cores (pinned apart from the apparatus's) busy, summed, 100 = one core
    # (-1: not pinned apart): what ran there besides the server took its CPU.
    server_cores_busy_pct: float = -1.0
    upstream_lag_ms: float = -1.0  # how late the upstream's event loop woke, mean (-1: unknown)
    upstream_lag_max_ms: float = -1.0
    front_cpu_pct: float = -1.0  # nginx in front of the server, 100 = one core (-1: no front)
    front_rss_mb: float = -1.0
    front_server_connections: int = -1  # nginx -> an HTTP server, closed in the window (-1: none)
    timeseries: Mapping[str, list[float]] = field(default_factory=dict)
    others_on_cores: Mapping[str, float] = field(default_factory=dict)  # see `StepRecord`
    database_cpu_pct: Mapping[str, float] = field(default_factory=dict)  # see `StepRecord`
