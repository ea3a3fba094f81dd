"""Every threshold a judgement uses, declared once, with its unit in its name.

Why one frozen set: the verdict's rules (`lab.verdict`), the flags raised around a step
(`lab.run.apparatus`, `lab.run.generators`), the web UI's live flags and `lab advise`'s search
all read these numbers, and the flag registry's meanings and the docs' rule table print them.
When each module kept its own, they drifted (a 5 ms lag in one place, 5% of the delay in
another). It sits at the bottom layer, beside the flag registry, so that every layer can read it.

Units: `_pct` is percent (100 = one core where a CPU is meant), `_share` a fraction (0-1) of the
quantity named after it, `_ms` milliseconds, `_delays` multiples of the upstream's delay d.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Thresholds:
    # --- the server ---------------------------------------------------------------------------
    # The server's CPU at this share of the cores it can use: CPU-bound.
    server_cpu_saturated_share: float = 0.90
    # ... at this share, with requests waiting (p50 `queueing_delays` d or more): a core that busy
    # makes requests queue for it (an event loop at 85% of its core), the verdict's and `lab
    # advise`'s one notion of a busy server.
    server_cpu_busy_share: float = 0.70
    # ... under this share: it waits, it does not compute (a cap inferred from outside needs it).
    server_cpu_idle_share: float = 0.50
    # A database the lab started for the app (PostgreSQL, Redis) at this % of one core, below the
    # ideal: requests queue in it (Redis computes on one core; a PostgreSQL query on one each).
    database_cpu_busy_pct: float = 70.0
    # The server's memory at this share of the machine's.
    server_memory_share: float = 0.80
    # A server process runnable but waiting for a CPU this share of the window while the server
    # is not CPU-bound: something else took its core.
    server_cpu_wait_pct: float = 10.0
    # --- throughput and queueing --------------------------------------------------------------
    # Throughput at this share of the ideal (users / d, or the arrival rate) or more: nothing
    # limits it.
    tracks_ideal_share: float = 0.80
    # Requests in flight at most this share of the offered load: a plateau.
    plateau_share: float = 0.80
    # p50 at least this many delays with the in-flight count seen by the upstream: requests wait.
    queueing_delays: float = 1.2
    # ... inferred from outside: overhead per request lowers throughput x d a little too, while a
    # full pool makes requests wait whole service times, so a wider margin.
    queueing_inferred_delays: float = 1.5
    # A plateau within this share (plus one request) of what the knobs allow: the knobs explain it.
    knob_cap_tolerance_share: float = 0.10
    # Fewer requests offered at once than this: no plateau can be told.
    min_offered_requests: float = 2.0
    # The upstream answered at least this share of the step's answers: the load went through it,
    # so its in-flight counter counts the server's requests.
    through_upstream_share: float = 0.50
    # The upstream's own service time (its answers' mean, as it measured them) at least this many
    # of its configured delays: the upstream itself was slow, whatever the server did.
    upstream_slow_delays: float = 1.5
    # --- stalls ------------------------------------------------------------------------------
    # A measured second with at most this share of the step's median answers a second, while
    # requests waited: an outage (a GC pause, a lock convoy, a worker respawned, a stopped
    # process) ...
    outage_second_share: float = 0.10
    # ... told only where the median second had at least this many answers (fewer, and a quiet
    # second is chance) ...
    outage_min_answers_per_s: float = 10.0
    # ... in a step of at least this many measured seconds (fewer: no median to stand out from) ...
    outage_min_seconds: int = 3
    # ... and not where the generator's own loop was late by this share of that second or more
    # (the generator stalled, not the server).
    outage_generator_lag_share: float = 0.50
    # A pause inside seconds (`lab.verdict.pauses`): answers per 100 ms at most
    # `outage_second_share` of the median 100 ms for at least this many d or this long,
    # whichever is larger (shorter: a request's own wait) ...
    pause_delays: float = 4.0
    pause_min_ms: float = 200.0
    # ... told only where the median 100 ms over that long holds this many answers (fewer, and
    # a quiet stretch is chance).
    pause_min_expected_answers: float = 10.0
    # Requests held through a pause (`lab.verdict.clusters`): a bin-found pause counts where the
    # answers that waited half its length or more are at least this share of what it held (closed
    # loop: one request a user; open: the arrivals of its first half) ...
    pause_held_share: float = 0.50
    # ... and where the bins are too thin, a group of answers far above the rest is a pause: its
    # least latency at least this many times the greatest below the empty stretch between them.
    pause_cluster_gap: float = 2.0
    # The server waited for a CPU this share of the window or more: something took its cores,
    # and the processes that ran on them are named whatever else fired (`held.cpu_taken`).
    server_wait_named_pct: float = 100 / 3
    # --- failed requests ----------------------------------------------------------------------
    # Failed or dropped requests at this share or more: they decide the figures, and a p99 of
    # the answered ones leaves out more than the 1% beyond it (the tail is not compared).
    errors_share: float = 0.01
    # Failed at least this share: the failures, not the answers, used the server's CPU (fast
    # refusals from a full pool), so the CPU is not the limit; the failures are.
    mostly_failed_share: float = 0.50
    # --- the lab's apparatus (load generators, upstream, host) --------------------------------
    # One generator process at this % of its core: it is saturated (`client_saturated`).
    generator_cpu_saturated_pct: float = 90.0
    # A core the generator or upstream runs on, busy % (mean of the window) ...
    apparatus_core_busy_pct: float = 90.0
    # ... with the apparatus using this much of it, or waiting this long for a CPU.
    apparatus_own_cpu_pct: float = 25.0
    apparatus_cpu_wait_pct: float = 10.0
    # Waiting for a CPU this share of the window is saturation whatever the mean busy says:
    # measured on 2 cores, the distortion of p50 starts between 24% and 35% of the time.
    apparatus_queued_pct: float = 30.0
    # The upstream's event loop waking this late on average, or this share of d, whichever is
    # larger: the upstream, not the model, set part of every request's wait.
    upstream_lag_ms: float = 5.0
    upstream_lag_delay_share: float = 0.05
    # CPU used by processes outside the run, % of one core (kernel softirq counted apart).
    host_busy_pct: float = 50.0
    # The host's CPU at this share of all its cores: no core is left to add.
    host_full_share: float = 0.90
    # New TCP connections per request at or above this: the server closes connections.
    connections_per_request: float = 0.5
    # nginx opening and closing a connection to an HTTP server behind it for at least this share
    # of requests, below the ideal: its keepalive pool was full, and the front set the cost.
    front_pool_churn_share: float = 0.1
    # nginx beside the server on its cores, below the ideal, and the server waited for a CPU this
    # share of the window or more with nothing outside the run on them: the two took turns on
    # the cores (gunicorn-gevent at 100 users on 1 core: 9% beside nginx, 1% bare).
    front_turns_wait_pct: float = 5.0
    # The generator's loop lag p99 at least this, and this share of the step's p99: its stalls
    # may have set the tail (the instrument's budget against wrk and oha: 15% or 3 ms).
    # The generator's loop lag p99 at least this many delays d, below the ideal: it held sends
    # and answers back long enough to lower the throughput too (the rule `apparatus`); shorter
    # lags move only the tail (`generator_lag`).
    generator_lag_throughput_delays: float = 1.0
    generator_lag_ms: float = 3.0
    generator_lag_p99_share: float = 0.15
    # A generator delay shorter than this is its loop's ordinary jitter, whatever a percentile's
    # budget (`lab.record.counted`).
    generator_touch_floor_ms: float = 1.0
    # --- trials ------------------------------------------------------------------------------
    # (max - min) / median of a point's trials at or above this: the point is `unstable`.
    trials_unstable_spread_share: float = 0.10
    # A percentile is compared only where this many answered requests lie beyond it in each
    # point (docs/trust.md; `lab.verdict.difference`): fewer, and it is one request's luck.
    requests_beyond_percentile: int = 10
    # --- claims (`lab.verdict.difference`) -----------------------------------------------------
    # Two figures with no interval at all (one trial, no floor, no seconds) within this share of
    # the first are no difference.
    difference_without_interval_share: float = 0.02
    # Server CPU under this % of a core at a model's best point: the CPU sample is mostly noise,
    # so no CPU ceiling is inferred from it.
    ceiling_min_server_cpu_pct: float = 10.0
    # --- the web UI's live view ---------------------------------------------------------------
    # At least this many users before "about one request per delay" reads as serialised, and
    # throughput at most this many times one request per delay.
    live_probe_users: int = 4
    live_serial_factor: float = 1.5
    # --- lab advise's search ------------------------------------------------------------------
    advise_pool_over_inflight: float = 1.5  # the pool over Little's law's in-flight count
    advise_plan_cpu_share: float = 0.80  # the share of each core a candidate plans to keep busy
    advise_full_pool_share: float = 0.90  # requests in flight at this share of the pool: full
    advise_queued_delays: float = 3.0  # p99 this many service times: requests waited somewhere

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


T = Thresholds()
