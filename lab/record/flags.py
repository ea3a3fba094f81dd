"""The flag registry: every flag a step or a point can carry, declared once.

Each flag says what it means, which evidence fields explain it, which module raises it and whether
it excludes the step from the verdict. The step record, the judge, the summary, the report, the
comparison and the docs' table all read this registry; `tests/test_flags.py` fails if a flag is
raised that is not declared here or declared here and never raised.
"""

from __future__ import annotations

from dataclasses import dataclass

from lab.record.errors import LabError
from lab.record.thresholds import T


@dataclass(frozen=True)
class Flag:
    """One flag: its meaning in plain words and what it does to the verdict."""

    name: str
    meaning: str
    evidence: tuple[str, ...]  # keys of the step's `evidence` that explain it
    raised_by: str  # the module that raises it
    excludes: bool  # a step carrying it is never part of the verdict
    tail: bool = False  # a step carrying it is never the basis of a p99 ranking or crossover
    # The lab or the machine, not the model, kept the step from a result (only with `excludes`):
    # the run measures such a step again (`lab.run.remeasure`), and a level where a candidate
    # carries it is never the level the answer is given at (`analysis.interfaces`). A model's own
    # loss (errors, a dead server, serialized) is a result: the model loses, the level stands.
    outside: bool = False


_FLAGS = (
    Flag(
        "serialized",
        "the concurrency probe found that requests did not overlap: not a fair result",
        ("serialized",),
        "lab.run.sweep",
        excludes=True,
    ),
    Flag(
        "client_saturated",
        f"a load generator process used {T.generator_cpu_saturated_pct:g}% of its core or "
        "more: throughput may be the client's limit, and its own queue set part of every "
        "latency, so the tail is never compared (as `apparatus_saturated`); where the verdict's "
        "rules name the apparatus as the step's limit, the step is `lab_limited` (compared on "
        "nothing)",
        ("client_saturated",),
        "lab.run.steps",
        excludes=False,
        tail=True,
    ),
    Flag(
        "host_busy",
        f"processes outside the run used {T.host_busy_pct:g}% of a core or more (kernel "
        "network work, softirq, is counted apart and not blamed on them): the figures are "
        "disturbed; where throughput fell short too, the rule `host_busy` names the machine as "
        "the limit (`lab_limited`)",
        ("host_busy",),
        "lab.run.apparatus",
        excludes=False,
    ),
    Flag(
        "front_limited",
        "nginx in front said in its error log that it ran out (worker_connections are not "
        "enough, or its file descriptors): the front, not the model, limited the step",
        ("front_limited",),
        "lab.run.steps",
        excludes=False,
    ),
    Flag(
        "errors",
        "at least one request failed (kinds in `errors`)",
        ("errors",),
        "lab.record.step",
        excludes=False,
    ),
    Flag(
        "no_responses",
        "not one request succeeded: the server or the load generator did not work",
        (),
        "lab.record.step",
        excludes=True,
    ),
    Flag(
        "server_died",
        "the server process exited during the step",
        ("exit_code", "log_tail"),
        "lab.run.steps",
        excludes=True,
    ),
    Flag(
        "server_hung",
        "the server was alive but did not answer /health after the step",
        ("server",),
        "lab.run.steps",
        excludes=True,
    ),
    Flag(
        "upstream_down",
        "the upstream exited or stalled: the step's errors are the upstream's, not the model's",
        ("upstream",),
        "lab.run.steps",
        excludes=True,
        outside=True,
    ),
    Flag(
        "loadgen_failed",
        "the load generator exited without a result",
        ("loadgen",),
        "lab.run.steps",
        excludes=True,
        outside=True,
    ),
    Flag(
        "start_failed",
        "the server exited or never answered /health: nothing was measured",
        ("start_failed",),
        "lab.run.sweep",
        excludes=True,
    ),
    Flag(
        "preflight_failed",
        "the server answered wrongly before any load: nothing was measured",
        ("preflight_failed",),
        "lab.run.sweep",
        excludes=True,
    ),
    Flag(
        "interrupted",
        "Ctrl-C or SIGTERM cut the step short; `lab run --resume` measures it again",
        ("interrupted",),
        "lab.run.steps",
        excludes=True,
        outside=True,
    ),
    Flag(
        "capped",
        "requests in flight (seen by the upstream, or inferred from outside: throughput x the "
        "unloaded service time) plateaued below the offered load while latency rose, at the limit "
        "the model's knobs set (e.g. 10 threads): that pool is the limit, a fair result for these "
        "knobs (the lab page raises it live when throughput stays under the ideal with CPU to "
        "spare)",
        ("capped",),
        "lab.verdict.table",
        excludes=False,
    ),
    Flag(
        "capped_unexplained",
        "requests in flight (seen by the upstream, or inferred from outside) plateaued below the "
        "offered load while latency rose, and no knob explains the ceiling (a pool in the app or "
        "in something it calls, a lock, a semaphore): not the model as configured",
        ("capped_unexplained",),
        "lab.verdict.table",
        excludes=True,
    ),
    Flag(
        "apparatus_saturated",
        f"a core the load generator or the upstream ran on was "
        f"{T.apparatus_core_busy_pct:g}% busy or more, or they waited for a CPU "
        f"{T.apparatus_queued_pct:g}% of the window or more, or the upstream's event loop woke "
        f"late (on average {T.upstream_lag_ms:g} ms, or {T.upstream_lag_delay_share:.0%} of the "
        "delay, whichever is larger): the tail is never compared, and the verdict's rule says "
        "whether the lab, not the model, set the throughput too (`lab_limited`)",
        ("apparatus_saturated",),
        "lab.run.apparatus",
        excludes=False,
        tail=True,
    ),
    Flag(
        "generator_lag",
        "the load generator's own stalls (its event loop waking late, or an open-loop send "
        f"leaving late) delayed more than 1% of the requests by at least "
        f"{T.generator_lag_p99_share:.0%} of the step's p99 (1 ms at least): they may have set "
        "the p99, so the step is never the basis of a p99 ranking or crossover; its throughput "
        "counts unless it stayed below the ideal, where the rule `apparatus` names the generator "
        "as the limit",
        ("generator_lag",),
        "lab.run.apparatus",
        excludes=False,
        tail=True,
    ),
    Flag(
        "generator_lag_extremes",
        "the load generator's own stalls touched more than 0.1% of the requests by 15% of the "
        "p99.9, or any one by 15% of the max: the p99.9 or the max may be the generator's (the "
        "p99 is not: no verdict is based on the others)",
        ("generator_lag_extremes",),
        "lab.run.apparatus",
        excludes=False,
    ),
    Flag(
        "lab_limited",
        "the verdict's rule named the lab's own apparatus (generators, upstream) or the machine "
        "it runs on as the step's limit: the figures are the lab's, not the model's, so the "
        "step is never best on anything, and a level where every model carries it is the lab's "
        "limit at that level",
        ("lab_limited",),
        "lab.verdict.table",
        excludes=True,
        outside=True,
    ),
    Flag(
        "failed_tail",
        f"failed, dropped or unfinished requests were more than {T.errors_share:.0%} of the "
        "step's: the p99 of the answered ones leaves out more than the share beyond it, so "
        "the step is never compared on p99 (its throughput, answered requests a second, still "
        "counts)",
        ("failed_tail",),
        "lab.verdict.table",
        excludes=False,
        tail=True,
    ),
    Flag(
        "stalled",
        f"the server almost stopped answering for at least one measured second (at most "
        f"{T.outage_second_share:.0%} of the step's median answers a second) while requests "
        "waited: the p99 of the answers may leave the waiting ones out, so the step is never the "
        "basis of a p99 ranking or crossover; its throughput counts, and its per-second interval "
        "leaves those seconds out (the outage is the event, not noise)",
        ("stalled",),
        "lab.verdict.table",
        excludes=False,
        tail=True,
    ),
    Flag(
        "paused",
        f"the server stopped answering for {T.pause_delays:g} d or {T.pause_min_ms:g} ms "
        "(whichever is longer) or more, seen in its answers per 100 ms or, where those are too "
        "few, from the requests held through it (a group of answers far above the rest): the "
        "pauses' count, lengths and period are the evidence; throughput and p99 are both "
        "compared (the held requests are counted)",
        ("paused",),
        "lab.verdict.table",
        excludes=False,
    ),
    Flag(
        "login_failed",
        "some simulated users' logins failed (`--login`): they sent the step's requests without "
        "a session, so the step measured another path of the app than the one asked for; not a "
        "fair result",
        ("login_failed", "login"),
        "lab.run.steps",
        excludes=True,
    ),
    Flag(
        "server_saturated",
        f"the server's CPU was at {T.server_cpu_saturated_share:.0%} of its cores or more: the "
        "model is CPU-bound here",
        ("server_saturated",),
        "lab.webui.liveflags",
        excludes=False,
    ),
    Flag(
        "unstable",
        f"trials of this point differ by {T.trials_unstable_spread_share:.0%} or more",
        (),
        "analysis.metrics",
        excludes=False,
    ),
)

FLAGS: dict[str, Flag] = {flag.name: flag for flag in _FLAGS}
# The lab, not the model, failed to measure a step carrying one of these (cut short, or its load
# generator gave no result): the step is owed, `lab run --resume` measures it again, and a
# record measured again supersedes it.
OWED = ("interrupted", "loadgen_failed")


def owed(flags: tuple[str, ...] | list[str]) -> bool:
    """The step is still owed: the lab failed to measure it (see OWED)."""
    return any(f in OWED for f in flags)


def declared(name: str) -> Flag:
    """The flag called `name`; raising an undeclared flag is a bug, so it fails loudly."""
    try:
        return FLAGS[name]
    except KeyError:
        raise LabError(f"flag {name!r} is not declared in lab/record/flags.py") from None


def explain(name: str) -> str:
    """The flag's meaning in plain words; an unknown flag (from a newer lab) is shown as is."""
    flag = FLAGS.get(name)
    return flag.meaning if flag else name


def excluding(flags: tuple[str, ...] | list[str]) -> list[str]:
    """The flags among `flags` that keep a step out of the verdict."""
    return [f for f in flags if f in FLAGS and FLAGS[f].excludes]


def outside(flags: tuple[str, ...] | list[str]) -> list[str]:
    """The excluding flags that name the lab or the machine, not the model (`Flag.outside`)."""
    return [f for f in flags if f in FLAGS and FLAGS[f].outside]


def tail_excluding(flags: tuple[str, ...] | list[str]) -> list[str]:
    """The flags among `flags` that keep a step out of p99 rankings and crossovers: the
    excluding ones, and those that say the tail may be the instrument's."""
    return [f for f in flags if f in FLAGS and (FLAGS[f].excludes or FLAGS[f].tail)]


def markdown_table() -> str:
    """The registry as a Markdown table, for docs/results-and-limits.md."""
    rows = ["| flag | meaning | excluded from the verdict |", "|---|---|---|"]
    rows += [f"| `{f.name}` | {f.meaning} | {_excluded(f)} |" for f in _FLAGS]
    return "\n".join(rows)


def _excluded(flag: Flag) -> str:
    if flag.outside:
        return "yes: the lab's or the machine's, measured again; never the answer's level"
    return "yes" if flag.excludes else "from p99 rankings" if flag.tail else "no"
