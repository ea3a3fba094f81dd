"""What the measured rows and counters say about each coroutines-vs-threads gap.

A figure far from the published one needs its reason, drawn from something this run measured.
Here three measurements carry most of it: the cost of one `time.sleep(0)` (wall, CPU and context
switches per call, at the default timer slack and at 1 ns), what starting 100 processes costs
(the children's CPU, spawn against fork), and each repeat's CPU seconds and context switches, which
tell interpreter work from waiting. A `--quick` figure scaled to the full size, or a protocol with
fewer tasks, is outside the band on purpose, and says so with the scaled figures.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Any, Protocol

from experiments.common import Row

Results = dict[tuple[str, str], dict[str, float]]
Explained = tuple[str, dict[str, Any]]  # (explanation, evidence)
FORK = "empty, start method fork"  # the section of the fork variant's row


class Sizes(Protocol):
    """The parts of coroutines_vs_threads.Protocol the explanations read."""

    @property
    def tasks(self) -> int: ...
    @property
    def zero_sleeps(self) -> int: ...
    @property
    def squares(self) -> int: ...
    @property
    def start_method(self) -> str: ...
    @property
    def slack_variant_ns(self) -> int: ...


@dataclass(frozen=True)
class Measured:
    """What one run measured, which each row's explanation draws on."""

    p: Sizes
    full: Sizes  # the published protocol's sizes
    pub: dict[str, dict[str, float]]  # published mean seconds by task and model
    results: Results
    slack: dict[str, dict[str, float]]  # zero_sleeps at the lowered timer slack, by model
    fork: dict[str, float]  # the empty task's processes with fork; {} if not run
    original: str  # the published machine (coroutines_vs_threads.toml `environment`)
    loadavg: str  # this machine's load average at the run's start (manifest)

    def per_call(self, model: str, slack: bool = False) -> dict[str, float]:
        """One time.sleep(0) of the zero_sleeps task above the model's empty task: wall and CPU
        µs and context switches per call (threads overlap theirs: wall per call of all)."""
        r = self.slack[model] if slack else self.results["zero_sleeps", model]
        base, calls = self.results["empty", model], self.p.tasks * self.p.zero_sleeps
        return {
            "calls": calls,
            "wall_us": round(max(r["mean_s"] - base["mean_s"], 0.0) / calls * 1e6, 2),
            "cpu_us": round(max(r["cpu_s"] - base["cpu_s"], 0.0) / calls * 1e6, 2),
            "switches": round(max(r["ctx_switches"] - base["ctx_switches"], 0.0) / calls, 3),
            "timer_slack_ns": r["timer_slack_ns"],
        }

    def published_call_us(self, model: str) -> float:
        """The original's time.sleep(0) loop per call: its mean over 100 x 10,000 calls."""
        return self.pub["zero_sleeps"][model] / (self.full.tasks * self.full.zero_sleeps) * 1e6


def startup(m: Measured, fork: bool = True, cite: bool = True) -> Explained:
    """What starting the processes costs here: wall, the children's CPU, and (`fork`) with fork;
    `cite` names the row it comes from (not in that row itself)."""
    e, n = m.results["empty", "processes"], m.p.tasks
    spawn = m.p.start_method == "spawn"
    how = "a new interpreter importing the task's module" if spawn else "a copy of the parent"
    facts = {
        "start_method": m.p.start_method,
        "processes": n,
        "wall_s": round(e["mean_s"], 3),
        "cpu_s": round(e["cpu_s"], 3),
        "cpus": len(os.sched_getaffinity(0)),
        "loadavg_at_start": m.loadavg,
        **({"fork_wall_s": round(m.fork["mean_s"], 3)} if m.fork else {}),
    }
    return (
        f"starting {n} processes with {m.p.start_method!r} takes {e['mean_s']:.3g} s here"
        + (" (row 'empty processes')" if cite else "")
        + f": each is {how}, {e['cpu_s'] / n * 1000:.0f} ms of CPU, "
        f"{e['cpu_s']:.3g} CPU s on {facts['cpus']} CPUs; the original ({m.original}) "
        f"started them in {m.pub['empty']['processes']} s"
        + (f"; with 'fork' {m.fork['mean_s']:.3g} s (row {FORK!r})" if m.fork and fork else ""),
        facts,
    )


def scaled(m: Measured, task: str) -> Explained | None:
    """A loop's --quick figure for processes: the empty task's time plus a multiple of the rest,
    which at that size is start-up variation more than work (what one task's work costs)."""
    size, full = (
        (m.p.zero_sleeps, m.full.zero_sleeps)
        if task == "zero_sleeps"
        else (m.p.squares, m.full.squares)
    )
    if size == full:
        return None
    r, base = m.results[task, "processes"], m.results["empty", "processes"]
    if task == "zero_sleeps":
        one = m.per_call("coroutines")
        work_ms, how = size * one["wall_us"] / 1000, f"{size} calls at {one['wall_us']:g} µs"
    else:
        c, b = m.results[task, "coroutines"], m.results["empty", "coroutines"]
        work_ms, how = (c["mean_s"] - b["mean_s"]) / m.p.tasks * 1000, "the coroutines' squares"
    facts = {"size": size, "published_size": full, "raw_s": round(r["mean_s"], 3)}
    facts |= {"empty_s": round(base["mean_s"], 3), "empty_sd_s": round(base["sd_s"], 3)}
    facts |= {"work_per_task_ms": round(work_ms, 3), "task_cpu_s": round(r["cpu_s"], 3)}
    return (
        f"Scaled on purpose: {size:,} per task instead of {full:,}, so the figure is the empty "
        f"task's {base['mean_s']:.3g} s plus {full / size:g}x each repeat's time above it. At "
        f"this size that time is start-up variation more than work: the task took "
        f"{r['mean_s']:.3g} s against the empty task's {base['mean_s']:.3g} s (sd "
        f"{base['sd_s']:.2g} s), one task's work is {work_ms:.3g} ms ({how}), and its children "
        f"used {r['cpu_s']:.3g} CPU s against the empty task's {base['cpu_s']:.3g}.",
        facts,
    )


def processes_gap(m: Measured, section: str) -> Explained:
    """Processes spend their time starting: spawn here, fork as the variant."""
    words, facts = startup(m, fork=section != FORK, cite=section != "empty")
    task = section.partition(",")[0]
    if section == FORK:
        return (
            "Another start method, on purpose: fork copies this process instead of starting an "
            f"interpreter and took {m.fork['mean_s']:.3g} s; the published figure is spawn's, "
            f"and {words}.",
            facts,
        )
    if task in ("zero_sleeps", "squares") and (said := scaled(m, task)):
        return said[0] + f" Besides, {words}.", facts | said[1]
    r = m.results[task, "processes"]
    if task == "empty":
        return f"Start-up only: {words}.", facts
    return (
        f"Start-up decides it: {words}. The task took {r['excess_s']:.3g} s beyond its sleep, "
        f"its children {r['cpu_s']:.3g} CPU s.",
        facts | {"task_excess_s": round(r["excess_s"], 3), "task_cpu_s": round(r["cpu_s"], 3)},
    )


def zero_sleeps_gap(m: Measured, model: str, slack: bool) -> Explained:
    """Why the time.sleep(0) loop takes what it takes: the cost of one call, from the counters."""
    c = m.per_call(model, slack)
    published = m.published_call_us(model)
    if model == "threads":
        one = m.per_call("coroutines", True) if m.slack else None
        cpus = len(os.sched_getaffinity(0))
        return (
            f"{c['calls']:,} calls by {m.p.tasks} threads: {c['wall_us']:g} µs of wall per call "
            f"(published {published:.2f} µs), {c['switches']:g} context switches per call. "
            + (
                f"At a slack of {c['timer_slack_ns']:,} ns hardly a call waits, so "
                if slack
                else "The threads' waits overlap (one sleeps while another holds the GIL), so "
            )
            + f"the wall is the calls' CPU: {c['cpu_us']:g} µs each, on {cpus} CPUs"
            + (
                f"; a call costs the coroutines {one['cpu_us']:g} µs of CPU at a slack of "
                f"{m.p.slack_variant_ns} ns, where none waits."
                if one
                else "."
            ),
            c | {"cpus": cpus},
        )
    if slack:
        return (
            f"With the slack at {m.p.slack_variant_ns} ns a time.sleep(0) no longer waits "
            f"({c['switches']:g} context switches per call) but still costs {c['cpu_us']:g} µs "
            f"of CPU ({c['wall_us']:g} µs of wall) per call, against {published:.2f} µs on the "
            "original: the time is spent in the call, in the kernel's handling of its timer.",
            c,
        )
    return (
        f"The coroutines make the calls one after another, so the time is calls x one call: "
        f"{c['wall_us']:g} µs here (row 'one time.sleep(0)'), {published:.2f} µs on the "
        f"original. A call here takes {c['cpu_us']:g} µs of CPU and {c['switches']:g} context "
        "switches: the process sleeps, and Linux wakes it up to the timer slack late "
        f"({c['timer_slack_ns']:,} ns, PR_GET_TIMERSLACK)"
        + (f"; at {m.p.slack_variant_ns} ns: the rows below." if m.slack else "."),
        c,
    )


def own_cost(m: Measured, task: str, model: str) -> Explained:
    """A coroutines or threads row from its own counters: CPU against wall tells interpreter work
    from waiting. The squares, pure interpreter work, measure this machine's speed at Python
    against the original's; the other rows are set against that speed."""
    r, n = m.results[task, model], m.p.tasks
    speed = {x: m.results["squares", x]["full_size_mean_s"] / m.pub["squares"][x] for x in MODEL2}
    facts: dict[str, Any] = {k: round(r[k], 6) for k in ("mean_s", "cpu_s", "ctx_switches")}
    facts |= {"loadavg_at_start": m.loadavg, "squares_vs_original": round(speed[model], 3)}
    published = m.pub[task][model]
    head = {
        "empty": f"{n} {model} started and finished in {r['mean_s'] * 1000:.3g} ms, "
        f"{r['mean_s'] / n * 1e6:.0f} µs each ({published / m.full.tasks * 1e6:.0f} µs on the "
        "original)",
        "squares": f"The list of squares, {r['mean_s']:.3g} s per repeat at this run's size",
    }.get(task, f"{r['excess_s']:.3g} s beyond the sleep")
    off = r["mean_s"] - r["cpu_s"]
    where = (
        f"{off:.3g} s of it on no CPU, waiting, over {r['ctx_switches']:.0f} context switches"
        if off > r["mean_s"] / 2
        else f"{r['cpu_s']:.3g} s of it on a CPU (the process's own work, Python and kernel)"
    )
    said = f"{head}. Per repeat: {r['mean_s']:.3g} s of wall, {where}; load average at the start "
    if task == "squares":
        return said + (
            f"{m.loadavg}. So the ratio is this machine's speed at Python against the "
            f"original's ({m.original}); the same work took the coroutines "
            f"{speed['coroutines']:.2f}x and the threads {speed['threads']:.2f}x its time."
        ), facts
    return said + (
        f"{m.loadavg}. This machine takes {speed['coroutines']:.2f}x the original's time for "
        "pure-Python work (squares, coroutines); what else separates the two figures is not "
        "measured here."
    ), facts


MODEL2 = ("coroutines", "threads")  # the models that run the squares in one interpreter


def explain(m: Measured, row: Row) -> Row:
    """`row` with why its ratio is outside GAP_BAND, from the run's own rows and counters."""
    if not row.gap():
        return row
    task, model = row.section.partition(",")[0], row.metric
    if m.p.tasks != m.full.tasks:
        said: Explained = (
            f"Scaled on purpose: {m.p.tasks} concurrent tasks, not the published "
            f"{m.full.tasks}, so start-up and the work run side by side do not compare.",
            {"tasks": m.p.tasks, "published_tasks": m.full.tasks},
        )
    elif model == "processes":
        said = processes_gap(m, row.section)
    elif task == "zero_sleeps":
        said = zero_sleeps_gap(m, model, "slack" in row.section)
    else:
        said = own_cost(m, task, model)
    return replace(row, explanation=said[0], evidence=said[1])
