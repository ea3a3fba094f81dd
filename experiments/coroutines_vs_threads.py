"""`coroutines-vs-threads`: asyncio coroutines vs threads vs processes (SuperFastPython, 2023).

Five task types, 100 concurrent tasks each, repeated (30 by default), mean and spread per model.
The `--quick` protocol shortens the sleeps and the loops; to compare it fairly with the published
means every figure is also given at the full protocol's size: for the sleep tasks the measured
excess over the ideal (the longest sleep) is added to the full protocol's ideal, and the
time.sleep(0) loop and the list of squares have their work (the time above the same model's empty
task, i.e. above its start-up cost) scaled linearly by their length. Raw seconds stay in the
details table.

A time.sleep(0) on Linux waits for a timer that may fire up to the timer slack late (50 µs by
default), where the macOS original paid ~0.5 µs a call, so that task is also measured with the
slack set to 1 ns, and one call's cost is a row of its own. Each repeat also keeps its CPU seconds
and context switches; experiments/cvt_gaps.py explains every row outside 0.5-2x from them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from experiments.common import Reproduction, Row, RunDir, load_published, mean, run_child, stdev
from experiments.cvt_gaps import FORK, Measured, Results, explain

MODELS = {
    "coroutines": "asyncio tasks created and gathered (blocking bodies block the loop)",
    "threads": "threading.Thread per task, started then joined",
    "processes": "multiprocessing.Process per task (start method in the protocol), started, joined",
}
TASKS = ("fixed_sleep", "random_sleep", "empty", "zero_sleeps", "squares")


@dataclass(frozen=True)
class Protocol:
    tasks: int = 100
    repeats: int = 30
    sleep_s: float = 5.0
    zero_sleeps: int = 10_000
    squares: int = 1_000_000
    start_method: str = "spawn"  # the original ran on macOS, where spawn is the default
    slack_variant_ns: int = 1  # 0 skips the timer-slack variant of the time.sleep(0) task
    fork_variant: bool = True  # also time the empty task's processes with the "fork" start method
    child_timeout_s: float = 3600.0


FULL = Protocol()
PROTOCOLS = {
    "default": FULL,
    "quick": Protocol(
        repeats=2, sleep_s=0.5, zero_sleeps=200, squares=100_000, child_timeout_s=200.0
    ),
}


def to_full_size(p: Protocol, task: str, excess_s: float, seconds: float, base_s: float) -> float:
    """A measured time expressed at the full protocol's size (see the module docstring);
    `base_s` is the same model's mean time for the empty task."""
    work = max(seconds - base_s, 0.0)
    match task:
        case "fixed_sleep":
            return FULL.sleep_s + excess_s
        case "random_sleep":  # expected longest of n uniform sleeps: s * n / (n + 1)
            return FULL.sleep_s * p.tasks / (p.tasks + 1) + excess_s
        case "zero_sleeps":
            return base_s + work * FULL.zero_sleeps / p.zero_sleeps
        case "squares":
            return base_s + work * FULL.squares / p.squares
    return seconds


def measure(
    p: Protocol, run: RunDir, model: str, task: str, base_s: float, slack_ns: int = 0
) -> list[dict[str, Any]]:
    args = [
        *[model, task, "--tasks", str(p.tasks), "--repeats", str(p.repeats)],
        *["--sleep-s", str(p.sleep_s), "--zero-sleeps", str(p.zero_sleeps)],
        *["--squares", str(p.squares), "--start-method", p.start_method],
    ]
    if slack_ns:
        args += ["--timer-slack-ns", str(slack_ns)]
    out = []
    for m in run_child("experiments.cvt_child", args, p.child_timeout_s):
        full = to_full_size(p, task, m["excess_s"], m["seconds"], base_s)
        m |= {"start_method": p.start_method, "full_size_s": full}  # the child read its slack
        run.record(m)
        out.append(m)
    return out


def summarise(ms: list[dict[str, Any]]) -> dict[str, float]:
    """Mean and spread of the repeats, and the counters that say where their time went."""
    raw = [m["seconds"] for m in ms]
    full = [m["full_size_s"] for m in ms]
    return {
        "mean_s": mean(raw),
        "sd_s": stdev(raw),
        "min_s": min(raw),
        "max_s": max(raw),
        "full_size_mean_s": mean(full),
        "full_size_sd_s": stdev(full),
        "excess_s": mean([m["excess_s"] for m in ms]),
        "cpu_s": mean([m["cpu_s"] for m in ms]),
        "ctx_switches": mean([m["ctx_switches"] for m in ms]),
        "timer_slack_ns": ms[0]["timer_slack_ns"],
    }


def fastest(by_model: dict[str, float]) -> str:
    return min(by_model, key=by_model.__getitem__)


def measure_tasks(p: Protocol, run: RunDir) -> Results:
    """Every task under every model, the empty task first: it is each model's baseline."""
    results: Results = {}
    for task in ("empty", *(t for t in TASKS if t != "empty")):
        for model in MODELS:
            base = results["empty", model]["mean_s"] if task != "empty" else 0.0
            results[task, model] = summarise(measure(p, run, model, task, base))
    return results


def measure_slack(p: Protocol, run: RunDir, results: Results) -> dict[str, dict[str, float]]:
    """The time.sleep(0) task again with the timer slack lowered (the variant that explains)."""
    if not p.slack_variant_ns:
        return {}
    return {
        model: summarise(
            measure(
                p, run, model, "zero_sleeps", results["empty", model]["mean_s"], p.slack_variant_ns
            )
        )
        for model in ("coroutines", "threads")
    }


def task_rows(
    p: Protocol, pub: dict[str, Any], results: Results
) -> tuple[list[Row], list[dict[str, Any]], dict[str, tuple[str, str]]]:
    """Rows published vs measured, the details table, and (published, measured) winner per task."""
    rows, details = [], []
    winners: dict[str, tuple[str, str]] = {}
    for task in TASKS:
        measured = {m: results[task, m]["full_size_mean_s"] for m in MODELS}
        winners[task] = (fastest(pub[task]), fastest(measured))
        for model in MODELS:
            r = results[task, model]
            note = f"sd {r['full_size_sd_s']:.3g} s over {p.repeats}"
            if p != FULL:
                note += f"; raw {r['mean_s']:.4g} s at the quick size"
            rows.append(Row(task, model, "s", pub[task][model], round(measured[model], 5), note))
            details.append(
                {
                    "task": task,
                    "model": model,
                    "repeats": p.repeats,
                    **{k: round(v, 5) for k, v in r.items()},
                    "vs_coroutines": round(measured[model] / measured["coroutines"], 3),
                    "published_vs_coroutines": round(pub[task][model] / pub[task]["coroutines"], 3),
                }
            )
    return rows, details, winners


def variant_rows(m: Measured, pub: dict[str, Any]) -> list[Row]:
    """The variants that explain: time.sleep(0) per call and with the slack lowered, fork."""
    ns = m.p.slack_variant_ns
    rows = [
        Row(
            "zero_sleeps" + (f", timer slack {ns} ns" if slack else ""),
            "one time.sleep(0), coroutines (calls in series)",
            "µs",
            None,
            (c := m.per_call("coroutines", slack))["wall_us"],
            f"{c['cpu_us']:g} µs CPU, {c['switches']:g} context switches per call; slack "
            f"{c['timer_slack_ns']:,} ns; published {m.published_call_us('coroutines'):.2f} µs",
        )
        for slack in (False, True)
        if not slack or m.slack
    ]
    rows += [
        Row(
            f"zero_sleeps, timer slack {ns} ns",
            model,
            "s",
            pub["zero_sleeps"][model],
            round(r["full_size_mean_s"], 5),
            f"prctl(PR_SET_TIMERSLACK, {ns}); sd {r['full_size_sd_s']:.3g} s",
        )
        for model, r in m.slack.items()
    ]
    if m.fork:
        note = f"sd {m.fork['sd_s']:.3g} s; the original's macOS default was spawn"
        fork = round(m.fork["mean_s"], 5)
        rows.append(Row(FORK, "processes", "s", pub["empty"]["processes"], fork, note))
    return rows


def conclude(m: Measured, winners: dict[str, tuple[str, str]]) -> str:
    agree = [t for t, (a, b) in winners.items() if a == b]
    differ = [f"{t} (published {a}, measured {b})" for t, (a, b) in winners.items() if a != b]
    one = m.per_call("coroutines")
    return (
        f"Fastest model per task agrees with the original for {', '.join(agree) or 'no task'}"
        + (f"; differs for {'; '.join(differ)}" if differ else "")
        + f". One time.sleep(0) costs {one['wall_us']:g} µs here (the original's "
        f"{m.published_call_us('coroutines'):.2f} µs): Linux wakes a sleep up to the timer "
        f"slack late ({one['timer_slack_ns']:,} ns)"
        + (
            f"; with the slack at {m.p.slack_variant_ns} ns a call still costs "
            f"{m.per_call('coroutines', True)['wall_us']:g} µs"
            if m.slack
            else ""
        )
        + f". Processes use the {m.p.start_method!r} start method."
        + (" Quick protocol: figures scaled to the full protocol size." if m.p != FULL else "")
    )


def run(p: Protocol, run: RunDir) -> Reproduction:
    published = load_published("coroutines_vs_threads")
    pub = published["figures"]
    results = measure_tasks(p, run)
    slack = measure_slack(p, run, results)
    fork: dict[str, float] = {}
    if p.fork_variant and p.start_method != "fork":
        fork = summarise(measure(replace(p, start_method="fork"), run, "processes", "empty", 0.0))
    loadavg = run.manifest["environment"].get("loadavg", "?")
    m = Measured(p, FULL, pub, results, slack, fork, published["environment"], loadavg)
    rows, details, winners = task_rows(p, pub, results)
    rows = [explain(m, r) for r in rows + variant_rows(m, pub)]
    return Reproduction(rows, conclude(m, winners), [], {"raw seconds per task and model": details})


SUMMARY = "asyncio coroutines vs threads vs processes on five task types, 100 tasks each"
