"""`pool-overhead`: gevent pool vs thread pool in one process (zacharyvoase, 2012), then more.

The original ran 10,000 tasks of a 5 ms sleep through a pool of N workers and reported
overhead = total time / ideal time (ideal = 5 ms x tasks / N). It found gevent ~2.0 at low N,
threads ~1.03, and threads slower than gevent from about 80-90 workers. It could not see CPU time,
memory or per-task latency, and a sleep is not I/O on a file descriptor; this reproduction records
all three and repeats the sweep with each task a keep-alive HTTP request to the mock upstream.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, replace
from typing import Any

from experiments.common import (
    Reproduction,
    Row,
    RunDir,
    free_port,
    load_published,
    mean,
    run_child,
    serving,
    stdev,
)
from lab.backends.base import upstream_argv

MODELS = {
    "gevent": "gevent.pool.Pool(N), one greenlet spawned per task, monkey-patched process",
    "threads": "N threading.Thread workers pulling from one queue.Queue, unpatched process",
}


@dataclass(frozen=True)
class Protocol:
    tasks: int = 10_000
    sleep_ms: float = 5.0
    sizes: tuple[int, ...] = (1, *range(10, 1001, 10))
    trials: int = 3
    io_tasks: int = 10_000  # the real-I/O variant: each task is GET /delay?ms=sleep_ms upstream
    io_sizes: tuple[int, ...] = (1, 10, 50, 100, 200, 500, 1000)
    io_trials: int = 1
    child_timeout_s: float = 900.0


PROTOCOLS = {
    "default": Protocol(),
    "quick": Protocol(
        tasks=1000,
        sizes=(1, 10, 20, 50, 100, 200, 500, 1000),
        trials=2,
        io_tasks=1000,
        io_sizes=(10, 100, 500),
        child_timeout_s=120.0,
    ),
}


def sweep(p: Protocol, run: RunDir, variant: str, url: str = "") -> list[dict[str, Any]]:
    """Every (pool size, model) in its own child, models interleaved so drift hits both alike."""
    if variant == "sleep":
        tasks, sizes, trials = p.tasks, p.sizes, p.trials
    else:
        tasks, sizes, trials = p.io_tasks, p.io_sizes, p.io_trials
    rows = []
    for size in sizes:
        for model in MODELS:
            args = [
                *[model, "--size", str(size), "--tasks", str(tasks)],
                *["--sleep-ms", str(p.sleep_ms), "--trials", str(trials)],
                *["--hlog-dir", str(run.path), "--variant", variant],
            ]
            if url:
                args += ["--url", url]
            for m in run_child("experiments.pool_child", args, p.child_timeout_s):
                run.record(m)
                rows.append(m)
    return rows


def by_model_size(measured: list[dict[str, Any]], key: str) -> dict[str, dict[int, list[float]]]:
    out: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for m in measured:
        out[m["model"]][m["size"]].append(m[key])
    return out


def crossover(overhead: dict[str, dict[int, list[float]]]) -> int | None:
    """The smallest pool size from which threads' mean overhead exceeds gevent's at every larger
    measured size (a stable crossover, not one noisy point); None if threads never lose."""
    sizes = sorted(overhead["threads"])
    worse = [mean(overhead["threads"][n]) > mean(overhead["gevent"][n]) for n in sizes]
    found = None
    for n, w in zip(reversed(sizes), reversed(worse), strict=True):
        if not w:
            break
        found = n
    return found


def plot(sleep: list[dict[str, Any]], io: list[dict[str, Any]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(16, 4.5))
    for variant, data, ax in (("sleep", sleep, axes[0]), ("upstream I/O", io, axes[1])):
        ov = by_model_size(data, "overhead")
        for model, series in ov.items():
            xs = sorted(series)
            ax.plot(xs, [mean(series[x]) for x in xs], marker=".", label=model)
        if data and (cross := crossover(ov)) is not None:
            ax.axvline(cross, color="grey", linestyle="--", label=f"crossover N={cross}")
        ax.set(
            title=f"overhead vs pool size ({variant})",
            xlabel="pool size N",
            ylabel="total / ideal",
            yscale="log",
        )
        if data:
            ax.legend()
    cpu = by_model_size(sleep, "cpu_s")
    for model, series in cpu.items():
        xs = sorted(series)
        axes[2].plot(xs, [mean(series[x]) for x in xs], marker=".", label=f"{model} CPU s")
    axes[2].set(title="CPU seconds per trial (sleep)", xlabel="pool size N", ylabel="CPU s")
    axes[2].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def details(measured: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What the original could not give, per model and pool size: spread, CPU, memory, latency."""
    out = []
    for n in sorted({m["size"] for m in measured}):
        for model in MODELS:
            ms = [m for m in measured if m["model"] == model and m["size"] == n]
            task = [m["task_ms"] for m in ms]
            out.append(
                {
                    "model": model,
                    "N": n,
                    "overhead": round(mean([m["overhead"] for m in ms]), 3),
                    "sd": round(stdev([m["overhead"] for m in ms]), 3),
                    "total_s": round(mean([m["total_s"] for m in ms]), 3),
                    "cpu_s": round(mean([m["cpu_s"] for m in ms]), 3),
                    "peak_rss_mb": max(m["peak_rss_mb"] for m in ms),
                    "rss_growth_mb": round(max(m["peak_rss_mb"] - m["base_rss_mb"] for m in ms), 2),
                    "task_p50_ms": round(mean([t["p50"] for t in task]), 3),
                    "task_p99_ms": round(mean([t["p99"] for t in task]), 3),
                    "task_max_ms": max(t["max"] for t in task),
                    "errors": sum(m["errors"] for m in ms),
                }
            )
    return out


def run(p: Protocol, run: RunDir) -> Reproduction:
    sleep = sweep(p, run, "sleep")
    io: list[dict[str, Any]] = []
    if p.io_sizes:
        port = free_port()
        argv = upstream_argv(port, "--delay-ms", str(p.sleep_ms))
        with serving(argv, f"http://127.0.0.1:{port}/health", run.path / "logs/upstream.log"):
            io = sweep(p, run, "io", f"http://127.0.0.1:{port}/delay?ms={p.sleep_ms:g}")
    plot(sleep, io, str(run.path / "overhead.png"))
    return tabulate(p, sleep, io)


def threads_slower(overhead: dict[str, dict[int, list[float]]]) -> list[int]:
    """Pool sizes at which threads' mean overhead is above gevent's."""
    return [
        n
        for n in sorted(overhead["threads"])
        if mean(overhead["threads"][n]) > mean(overhead["gevent"][n])
    ]


def tabulate(p: Protocol, sleep: list[dict[str, Any]], io: list[dict[str, Any]]) -> Reproduction:
    """The published-vs-measured table from the measurements (also usable on a saved run)."""
    pub = load_published("pool_overhead")["figures"]
    ov = by_model_size(sleep, "overhead")
    low, cross, max_n = min(ov["gevent"]), crossover(ov), max(ov["threads"])
    slower = threads_slower(ov)
    rows = [
        Row(
            "sleep",
            f"gevent overhead at N={low}",
            "x",
            pub["gevent_overhead_low_n"],
            round(mean(ov["gevent"][low]), 3),
            f"sd {stdev(ov['gevent'][low]):.3f}",
        ),
        Row(
            "sleep",
            f"threads overhead at N={low}",
            "x",
            pub["threads_overhead_low_n"],
            round(mean(ov["threads"][low]), 3),
            f"sd {stdev(ov['threads'][low]):.3f}",
        ),
        Row(
            "sleep",
            "crossover pool size (threads slower from here on)",
            "workers",
            f"{pub['crossover_low']}-{pub['crossover_high']}",
            cross if cross is not None else f"none up to {max_n}",
            "smallest N with threads' mean overhead above gevent's at every larger N",
        ),
        Row(
            "sleep",
            "pool sizes where threads are slower",
            "sizes",
            None,
            f"{len(slower)} of {len(ov['threads'])}",
            f"first at N={slower[0]}" if slower else "never",
        ),
    ]
    if io:
        io_ov = by_model_size(io, "overhead")
        io_cross = crossover(io_ov)
        io_slower = threads_slower(io_ov)
        rows.append(
            Row(
                "upstream I/O",
                "crossover pool size",
                "workers",
                None,
                io_cross if io_cross is not None else f"none up to {max(io_ov['threads'])}",
                f"threads slower at N={io_slower or 'none'}; each task a keep-alive GET "
                "to the mock upstream",
            )
        )
    rows[:2] = [explain_low(p, sleep, r) if r.gap() else r for r in rows[:2]]
    tables = {"sleep: per model and pool size (mean of trials)": details(sleep)}
    if io:
        tables["upstream I/O: per model and pool size"] = details(io)
    return Reproduction(rows, conclude(p, pub, ov), ["overhead.png"], tables)


def explain_low(p: Protocol, sleep: list[dict[str, Any]], row: Row) -> Row:
    """An overhead at the smallest pool far from the published one: there each worker runs its
    tasks one after another, so overhead - 1 is what a task costs beyond its sleep, and the
    task latency histograms and CPU seconds say where it went (in the sleep or between tasks)."""
    model = row.metric.split()[0]
    low = min(m["size"] for m in sleep)
    ms = [m for m in sleep if m["model"] == model and m["size"] == low]
    ov, p50 = mean([m["overhead"] for m in ms]), mean([m["task_ms"]["p50"] for m in ms])
    extra = (ov - 1) * p.sleep_ms
    cpu_ms = mean([m["cpu_s"] for m in ms]) / p.tasks * 1000
    published, original = float(row.published or 0), load_published("pool_overhead")["environment"]
    facts = {"size": low, "tasks": p.tasks, "overhead": round(ov, 3), "task_p50_ms": p50}
    facts |= {"extra_ms_per_task": round(extra, 3), "cpu_ms_per_task": round(cpu_ms, 4)}
    said = (
        f"At N={low} each worker runs {p.tasks / low:g} tasks one after another, so an overhead "
        f"of {ov:.3g} is {extra:.2f} ms per task beyond its {p.sleep_ms:g} ms sleep: "
        f"{p50 - p.sleep_ms:.2f} ms of it inside the sleep (task p50 {p50:.2f} ms, latency "
        f"histograms), the rest between tasks; {cpu_ms:.3f} ms of CPU per task. The published "
        f"{published:g} is {(published - 1) * p.sleep_ms:.2f} ms per task ({original})."
    )
    return replace(row, explanation=said, evidence=facts)


def conclude(p: Protocol, pub: dict[str, Any], ov: dict[str, dict[int, list[float]]]) -> str:
    low, cross, max_n = min(ov["gevent"]), crossover(ov), max(ov["threads"])
    slower = threads_slower(ov)
    g1, t1 = mean(ov["gevent"][low]), mean(ov["threads"][low])
    if cross is not None:
        crossing = (
            f"Threads become slower than gevent from N={cross} on "
            f"(published about {pub['crossover_low']}-{pub['crossover_high']})."
        )
    else:
        crossing = (
            f"There is no stable crossover up to N={max_n}: threads were slower than "
            f"gevent at only {len(slower)} of {len(ov['threads'])} pool sizes"
            + (f" (first at N={slower[0]})" if slower else "")
            + f", so the published crossover at {pub['crossover_low']}-"
            f"{pub['crossover_high']} does not reproduce."
        )
    return (
        f"At N={low} gevent's overhead is {g1:.2f} (published ~{pub['gevent_overhead_low_n']}) and "
        f"threads' {t1:.2f} (published ~{pub['threads_overhead_low_n']}). {crossing}"
        + (f" {p.tasks} tasks per trial (published 10,000)." if p.tasks != 10_000 else "")
    )


SUMMARY = "gevent pool vs thread pool in-process: overhead vs pool size, CPU, memory, real I/O"
