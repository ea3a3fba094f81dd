"""The ordered table of the verdict's rules: the first that fires names the step's limit.

The order is the precedence (see `lab.verdict.rules` for what each effect means): faults and a
serialised model first, then what the server ran out of, then the lab's own apparatus and the
host, then caps, then failed requests, then the rest. Adding a rule is one entry here.
"""

from __future__ import annotations

from collections.abc import Callable

from lab.record.thresholds import T
from lab.verdict.caps import app_pool, hidden_cap, knob_cap
from lab.verdict.facts import Facts
from lab.verdict.held import (
    apparatus,
    connections,
    cpu_queued,
    cpu_taken,
    host_busy,
    host_cpu,
    upstream_late,
)
from lab.verdict.rules import (
    COMPARED,
    EXCLUDED,
    TAIL,
    Finding,
    Rule,
    both_full,
    database,
    errors,
    fault,
    front,
    memory,
    not_found,
    nothing_measured,
    serialized,
    server_busy,
    server_cpu,
    tracks_ideal,
    upstream_down,
    upstream_slow,
)
from lab.verdict.stalls import paused, stalled

_LAB = "lab_limited"
_CPU = f"{T.server_cpu_saturated_share:.0%}"
_GEN = f"{T.generator_cpu_saturated_pct:g}%"
_IDEAL = f"{T.tracks_ideal_share:.0%} of the ideal"
_WAIT = f"{T.apparatus_cpu_wait_pct:g}%"
_CAP_WHEN = (
    f"in flight at most {T.plateau_share:.0%} of the offered load, p50 at least "
    f"{T.queueing_delays:g} d (seen by the upstream) or {T.queueing_inferred_delays:g} d "
    f"(inferred), server CPU under {T.server_cpu_idle_share:.0%} of its cores, nothing disturbing"
)


def _rule(
    check: Callable[[Facts], Finding | None],
    limit: str,
    effect: str,
    when: str,
    advice: str,
    flag: str | None = None,
) -> Rule:
    """A rule named after its check: the name the record and the docs show is the function's,
    so the two cannot drift apart."""
    return Rule(check.__name__, limit, effect, when, advice, check, flag)


RULES: tuple[Rule, ...] = (
    _rule(
        nothing_measured,
        limit="errors",
        effect=EXCLUDED,
        when="no request was answered, or the step was skipped",
        advice="see the step's flags: the server did not start, answered wrongly or failed",
    ),
    _rule(
        upstream_down,
        limit="upstream",
        effect=EXCLUDED,
        when="the upstream exited or stalled during the step",
        advice="see the upstream's log",
    ),
    _rule(
        fault,
        limit="fault",
        effect=EXCLUDED,
        when="the server died or hung, the generator failed, or the step was interrupted",
        advice="`lab run --resume` measures an owed step again",
    ),
    _rule(
        serialized,
        limit="concurrency_cap",
        effect=EXCLUDED,
        when="the concurrency probe saw served requests run one at a time",
        advice="patch before imports (gevent's early monkey-patch), or a driver the loop can see",
    ),
    _rule(
        front,
        limit="front",
        effect=COMPARED,
        when="nginx in front (`--front nginx`) said in its error log that it ran out "
        "(worker_connections are not enough, or its file descriptors), or its CPU was at "
        f"{_CPU} of its workers' cores, or of the cores it shares with the server while it "
        "used more of them than the server, or (below the ideal) it opened a new connection "
        f"to an HTTP server for {T.front_pool_churn_share:.0%} of requests or more: its "
        "keepalive pool was full; or (below the ideal) the server waited for a CPU "
        f"{T.front_turns_wait_pct:g}% of the window or more on the cores nginx shares with it, "
        "nothing outside the run on them: the two took turns",
        advice="more nginx workers (--front-knob workers=N), connections or keepalive (its pool "
        "of idle server connections), or cores for the front; the model behind it did not "
        "limit this step",
    ),
    _rule(
        memory,
        limit="memory",
        effect=COMPARED,
        when=f"the server's memory at {T.server_memory_share:.0%} of the machine's or more",
        advice="fewer connections, or less memory per connection",
    ),
    _rule(
        both_full,
        limit="server_cpu",
        effect=EXCLUDED,
        when=f"the server's CPU at {_CPU} of the cores it can use while the lab's apparatus "
        f"was full too (as the rule `apparatus` reads it), where fewer than "
        f"{T.mostly_failed_share:.0%} of requests failed",
        advice="more server cores or less CPU per request first, then more generators: "
        "the figure is the lower of two limits and cannot say which",
        flag=_LAB,
    ),
    _rule(
        server_cpu,
        limit="server_cpu",
        effect=COMPARED,
        when=f"the server's CPU at {_CPU} of the cores it can use, the lab's apparatus not "
        f"full, where fewer than {T.mostly_failed_share:.0%} of requests failed (else the "
        "failures used the CPU)",
        advice="more cores (processes) or less CPU per request; more concurrency cannot help",
    ),
    _rule(
        database,
        limit="database",
        effect=COMPARED,
        when=f"below {_IDEAL}, nothing of the lab's disturbing, while a database the lab "
        f"started for the app (PostgreSQL, Redis) used {T.database_cpu_busy_pct:g}% of a core "
        f"or more, where fewer than {T.mostly_failed_share:.0%} of requests failed",
        advice="fewer or cheaper queries per request (an index, a cache), or a database with "
        "more cores; the server's model does not change what the database must do",
    ),
    _rule(
        connections,
        limit="connections",
        effect=EXCLUDED,
        when=f"the generator full while the server closed {T.connections_per_request:g} "
        "connections or more per request",
        advice="a server that keeps connections alive, or a front that does; more generators "
        "share the work but do not remove it",
        flag=_LAB,
    ),
    _rule(
        host_cpu,
        limit="host_cpu",
        effect=EXCLUDED,
        when=f"the generator full (one process at {_GEN} of its core) on a host whose cores "
        f"were all {T.host_full_share:.0%} busy",
        advice="run generators on another machine (--remote-generators): more on this one "
        "cannot help",
        flag=_LAB,
    ),
    _rule(
        upstream_late,
        limit="upstream",
        effect=EXCLUDED,
        when=f"the upstream's loop late on average by {T.upstream_lag_ms:g} ms or "
        f"{T.upstream_lag_delay_share:.0%} of d, whichever is larger",
        advice="give the upstream more processes or a core of its own",
        flag=_LAB,
    ),
    _rule(
        apparatus,
        limit="apparatus",
        effect=EXCLUDED,
        when=f"a generator process at {_GEN} of its core, a core of the apparatus "
        f"{T.apparatus_core_busy_pct:g}% busy with the apparatus using "
        f"{T.apparatus_own_cpu_pct:g}% of it (or waiting {_WAIT}), the apparatus waiting "
        f"{T.apparatus_queued_pct:g}% of the window for a CPU, or the generator's loop late "
        f"(p99 {T.generator_lag_throughput_delays:g} d or more) with throughput below {_IDEAL}",
        advice="more generators (--generators), fewer users, or a machine with more cores",
        flag=_LAB,
    ),
    _rule(
        host_busy,
        limit="host_busy",
        effect=EXCLUDED,
        when=f"other processes using {T.host_busy_pct:g}% of a core (on the machine, or on "
        "the server's own cores where it is pinned apart) while the server waited "
        f"{T.server_cpu_wait_pct:g}% of the window for a CPU it was not using, or the "
        f"apparatus {T.apparatus_cpu_wait_pct:g}%, with throughput below {_IDEAL}",
        advice="measure again on a quiet machine",
        flag=_LAB,
    ),
    _rule(
        cpu_taken,
        limit="host_busy",
        effect=EXCLUDED,
        when=f"the server's threads waited for a CPU {T.server_wait_named_pct:.0f}% of the window "
        "(summed over them) or "
        "more while processes outside the run used 10% of a core or more where it could run "
        f"(they are named), with throughput below {_IDEAL}",
        advice="stop the processes named or move them off the server's cores (`taskset`); a run "
        "with `--no-pin` shares every core: run without it",
        flag=_LAB,
    ),
    _rule(
        stalled,
        limit="stall",
        effect=TAIL,
        when=f"a measured second with at most {T.outage_second_share:.0%} of the step's median "
        f"answers a second (of the seconds with any; a median of "
        f"{T.outage_min_answers_per_s:g} or more over {T.outage_min_seconds} or more) while "
        f"requests waited, the generator's own loop late by less than "
        f"{T.outage_generator_lag_share * 1000:g} ms that second",
        advice="find the pause: the server's log, its GC, a lock, a worker that restarted",
        flag="stalled",
    ),
    _rule(
        knob_cap,
        limit="concurrency_cap",
        effect=COMPARED,
        when=f"{_CAP_WHEN}, and the knobs allow about the plateau (neither more nor less, "
        f"within {T.knob_cap_tolerance_share:.0%} + 1)",
        advice="a larger pool (the knob named)",
        flag="capped",
    ),
    _rule(
        app_pool,
        limit="concurrency_cap",
        effect=COMPARED,
        when=f"{_CAP_WHEN}, where the knobs allow more or less, and the user's app's processes "
        "held about as many connections to the lab's PostgreSQL, Redis or upstream (within "
        f"{T.knob_cap_tolerance_share:.0%} + 1)",
        advice="a larger pool in the app (the knob named), or fewer users per process",
        flag="capped",
    ),
    _rule(
        hidden_cap,
        limit="concurrency_cap",
        effect=EXCLUDED,
        when=f"{_CAP_WHEN}, where the knobs allow more or less; failed requests never lift it",
        advice="find the pool, lock or semaphore in the app or what it calls",
        flag="capped_unexplained",
    ),
    _rule(
        upstream_slow,
        limit="upstream",
        effect=EXCLUDED,
        when="the step's load through the upstream, its own event loop late by "
        f"{T.upstream_slow_delays:g} d or more at its worst, throughput below {_IDEAL}",
        advice="a faster upstream",
        flag=_LAB,
    ),
    _rule(
        server_busy,
        limit="server_cpu",
        effect=COMPARED,
        when=f"the server's CPU at {T.server_cpu_busy_share:.0%} of its cores or more (under "
        f"{_CPU}), p50 {T.queueing_delays:g} d or more, throughput below {_IDEAL}, nothing "
        "disturbing, most requests answered",
        advice="more cores (processes) or less CPU per request: requests queue for a busy core",
    ),
    _rule(
        errors,
        limit="errors",
        effect=TAIL,
        when=f"failed, dropped or unfinished requests more than {T.errors_share:.0%} of all: "
        "the p99 of the answered ones leaves them out",
        advice="read the error kinds: refusals and timeouts mean a queue or a pool overflowed",
        flag="failed_tail",
    ),
    _rule(
        tracks_ideal,
        limit="none",
        effect=COMPARED,
        when=f"throughput at {_IDEAL} or more",
        advice="",
    ),
    _rule(
        paused,
        limit="pause",
        effect=COMPARED,
        when="the answers per 100 ms at most "
        f"{T.outage_second_share:.0%} of the step's median 100 ms for {T.pause_delays:g} d or "
        f"{T.pause_min_ms:g} ms, whichever is longer (told where the median holds "
        f"{T.pause_min_expected_answers:g} answers over that long), the longest request "
        "waiting half that or more, the generator's own loop late by less than half that",
        advice="find the pause: a GC, a lock, a blocking call in an event loop, a worker that "
        "restarted; its count, lengths and period are in the evidence",
        flag="paused",
    ),
    _rule(
        cpu_queued,
        limit="server_cpu",
        effect=COMPARED,
        when=f"the server's threads waited for a CPU {T.server_wait_named_pct:.0f}% of the window "
        "(summed over them) or "
        f"more, throughput below {_IDEAL}, no process outside the run seen on its cores",
        advice="fewer threads or processes per core, or more cores",
    ),
    _rule(
        not_found,
        limit="unknown",
        effect=COMPARED,
        when="none of the above fired",
        advice="read the reason's figures",
    ),
)
