"""`brownout`: the blog's production story, played on loopback under a constant arrival rate.

The upstream answers after `normal_ms`, then slows to `slow_ms` for a while, then recovers, while
requests keep arriving at a fixed rate (open loop, loadgen/open_loop.py: latency from each request's
intended start). Capacity arithmetic from the story: a model holding W x P requests at once can
serve at most W x P / delay requests per second; below the arrival rate the queue grows for the
whole slowdown and drains only after it. uWSGI threads (few, as in production) are set against
uWSGI gevent (many greenlets), and the threads model is also run closed loop (users =
rate x normal delay, like a load test with a fixed user count) under the same schedule, which
shows how a closed-loop test hides the brownout: its users simply wait and send less.

Per second, for each run: throughput, p50/p99 latency, errors, dropped and in-flight requests
(steps.jsonl `timeseries`, plotted in brownout.png). A row outside 0.5-2x of the story says why:
the offered rate is scaled with the capacities, and a busy fraction is Little's law on the
in-flight count measured against the model's capacity.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, replace
from typing import Any

from experiments.common import Reproduction, Row, RunDir, free_port, load_published, mean
from lab.backends.base import CpuLayout, NativeBackend
from lab.config.models import Knobs, load_registry
from lab.config.scenario import UpstreamSpec
from lab.record.rundir import RunDir as LabRunDir
from lab.record.step import StepKey, step_record
from lab.run import generators
from lab.run.generator import measured_from, run_step
from lab.system.http_client import get
from loadgen.protocol import Done, Start


@dataclass(frozen=True)
class Run:
    """One load run under the brownout schedule: a registry model, its workers, the loop."""

    model: str
    workers: int
    mode: str = "open"  # "open" (constant arrival rate) or "closed" (fixed users)

    @property
    def label(self) -> str:
        return f"{self.model} x{self.workers} ({self.mode})"


@dataclass(frozen=True)
class Protocol:
    rate_rps: float = 40.0
    processes: int = 2
    runs: tuple[Run, ...] = (
        Run("uwsgi-threads", 8),
        Run("uwsgi-gevent", 1000),
        Run("uwsgi-threads", 8, "closed"),
    )
    phases: tuple[tuple[str, float, float], ...] = (  # (name, seconds, upstream delay ms)
        ("normal", 10.0, 100.0),
        ("slowdown", 15.0, 2000.0),
        ("recovery", 20.0, 100.0),
    )
    settle_s: float = 2.0
    cap: int = 2000  # open loop: most requests outstanding at once
    timeout_s: float = 30.0
    arrival: str = "constant"


PROTOCOLS = {
    "default": Protocol(),
    "quick": Protocol(
        phases=(("normal", 5.0, 100.0), ("slowdown", 8.0, 1000.0), ("recovery", 8.0, 100.0)),
        settle_s=1.0,
    ),
}
MODELS = {
    "uwsgi-threads": "uWSGI --threads W (servers/models.toml), W x processes requests at once",
    "uwsgi-gevent": "uWSGI --gevent W, patched before the app is imported (servers/models.toml)",
}


def set_delay(upstream_url: str, delay_ms: float) -> None:
    data = json.dumps({"delay_ms": delay_ms}).encode()
    status, body, _ = get(upstream_url, "/config", timeout_s=5, method="POST", data=data)
    if status != 200:
        raise RuntimeError(f"upstream /config answered {status}: {body[:200]!r}")


def drive(p: Protocol, upstream_url: str, t0_event: threading.Event, stop: threading.Event) -> None:
    """Change the upstream's delay at each phase boundary, counted from the measured start."""
    t0_event.wait()
    for _, seconds, delay_ms in p.phases:
        set_delay(upstream_url, delay_ms)
        if stop.wait(seconds):
            return


def closed_users(p: Protocol) -> int:
    """The closed-loop users that send the open loop's rate at the normal delay."""
    return max(1, round(p.rate_rps * p.phases[0][2] / 1000))


def load_step(p: Protocol, run: Run, urls: tuple[str, str], out: RunDir, key: StepKey) -> Done:
    """One step (server and upstream `urls`) under the schedule; open loop as `lab run` runs it."""
    (url, upstream_url), cpus = urls, CpuLayout.split(pin=True).client
    duration, log = sum(s for _, s, _ in p.phases), out.path / "logs" / "loadgen.log"
    start = Start(
        base_url=url, path="/io", settle_s=p.settle_s, duration_s=duration, timeout_s=p.timeout_s
    )
    if run.mode == "open":
        start = replace(start, rate_rps=p.rate_rps, max_outstanding=p.cap, arrival=p.arrival)
        start = generators.open_loop_start(start, cpus)
    else:
        start = replace(start, users=closed_users(p))
    measuring, stop = threading.Event(), threading.Event()
    driver = threading.Thread(target=drive, args=(p, upstream_url, measuring, stop), daemon=True)
    driver.start()
    try:
        with out.run.hlog_writer(key) as hlog:
            return run_step(
                start,
                log,
                cpus=cpus,
                on_measuring=lambda _: measuring.set(),
                on_histogram=hlog.write,
            )
    finally:
        stop.set()
        measuring.set()
        driver.join(timeout=10)
        set_delay(upstream_url, p.phases[0][2])


def measure(p: Protocol, run_dir: RunDir, index: int, run: Run) -> dict[str, Any]:
    registry = load_registry()
    (model,) = registry.pick([run.model])
    per = run.workers
    knobs = Knobs(
        processes=p.processes, concurrency=per, pool=per, timeout_s=int(p.timeout_s * 4)
    ).resolve(per)
    backend = NativeBackend(run_dir.path, CpuLayout.split(pin=True))
    try:
        upstream = backend.start_upstream(UpstreamSpec(delay_ms=p.phases[0][2]), free_port())
        server = backend.start_server(model, knobs, upstream.url, free_port())
        rate = p.rate_rps if run.mode == "open" else None
        users = closed_users(p) if run.mode == "closed" else None
        key = StepKey(run.model, run.mode, users, rate, index)
        done = load_step(p, run, (server.url, upstream.url), run_dir, key)
    finally:
        backend.close()
    capacity = model.capacity(knobs)
    context = {
        "capacity": capacity,
        "phases": p.phases,
        "knobs": knobs.__dict__,
        "label": run.label,
    }
    cap = p.cap if run.mode == "open" else None
    record = step_record(
        run_dir.path.name,
        key,
        measured_from(done),
        max_outstanding=cap,
        histogram=LabRunDir.hlog_relpath(key),
        context=context,
        generators=len(done.parts) or 1,
    )
    run_dir.run.append_step(record)
    r = {**vars(done), **(vars(done.open_loop) if done.open_loop else {})}
    out = {"label": run.label, "capacity": capacity, "users": users or p.cap, **r}
    run_dir.record(out)
    return out


def phase_windows(p: Protocol) -> list[tuple[str, float, float, float]]:
    """(name, start_s, end_s, delay_ms) of each phase in the measured window."""
    out, t = [], 0.0
    for name, seconds, delay in p.phases:
        out.append((name, t, t + seconds, delay))
        t += seconds
    return out


def samples(r: dict[str, Any], key: str, start: float, end: float) -> list[tuple[float, float]]:
    """(t, value) of the per-second `key` whose second ends in the second half of the phase."""
    ts, mid = r["timeseries"], (start + end) / 2
    return [(t, v) for t, v in zip(ts["t"], ts[key], strict=True) if mid < t <= end + 0.5]


def in_phase(r: dict[str, Any], key: str, start: float, end: float) -> list[float]:
    """The values of `samples`."""
    return [v for _, v in samples(r, key, start, end)]


def plot(p: Protocol, results: list[dict[str, Any]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = (
        ("rps", "throughput (ok/s)"),
        ("p99_ms", "p99 latency ms (log)"),
        ("errors", "errors/s"),
        ("inflight", "in flight (open loop)"),
    )
    fig, axes = plt.subplots(len(keys), 1, figsize=(11, 11), sharex=True)
    for ax, (key, title) in zip(axes, keys, strict=True):
        for r in results:
            if key in r["timeseries"]:
                ax.plot(r["timeseries"]["t"], r["timeseries"][key], marker=".", label=r["label"])
        for name, start, end, delay in phase_windows(p):
            if name != "normal":
                ax.axvspan(start, end, alpha=0.08 if name == "recovery" else 0.2, color="red")
            ax.text(
                start + 0.2,
                0.92,
                f"{name} ({delay:g} ms)",
                transform=ax.get_xaxis_transform(),
                fontsize=8,
            )
        ax.set_ylabel(title)
        if key == "p99_ms":
            ax.set_yscale("log")
    axes[0].legend(fontsize=8)
    axes[-1].set_xlabel(f"seconds (arrival rate {p.rate_rps:g} rps)")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def run(p: Protocol, run_dir: RunDir) -> Reproduction:
    results = [measure(p, run_dir, i, r) for i, r in enumerate(p.runs, 1)]
    plot(p, results, str(run_dir.path / "brownout.png"))
    return tabulate(p, results)


def tabulate(p: Protocol, results: list[dict[str, Any]]) -> Reproduction:
    """The table from the runs' records (measurements.jsonl), so a saved run can be re-read."""
    pub = load_published("brownout")["figures"]
    offered = Row(
        "story",
        "offered arrival rate",
        "rps",
        pub["offered_rps"],
        p.rate_rps,
        "scaled down here with the capacities, so the same side of capacity holds",
    )
    rows = [
        Row(
            "story",
            f"capacity = {pub['threads_total']} threads / "
            f"{pub['upstream_latency_s']} s upstream latency",
            "rps",
            pub["capacity_rps"],
            round(pub["threads_total"] / pub["upstream_latency_s"]),
            "the arithmetic redone",
        ),
        explain_rate(p, pub, results, offered) if offered.gap() else offered,
    ]
    for r in results:
        if "inflight" in r["timeseries"]:
            name, start, end, _ = phase_windows(p)[0]
            busy = mean(in_phase(r, "inflight", start, end)) / r["capacity"]
            row = Row(
                r["label"],
                f"{name}: busy fraction (client in flight / capacity)",
                "",
                pub["busy_fraction"],
                round(busy, 3),
                "story: only a third of the threads busy 95% of the time",
            )
            rows.append(explain_busy(p, r, row) if row.gap() else row)
    details = phase_rows(p, results, rows)
    return Reproduction(rows, conclude(p, results), ["brownout.png"], {"per phase": details})


def explain_rate(p: Protocol, pub: dict[str, Any], results: list[dict[str, Any]], row: Row) -> Row:
    """The offered rate is scaled on purpose: it sits where the story's did against capacity."""
    (_, _, _, normal), (_, _, _, slow) = phase_windows(p)[:2]
    threads = next((r for r in results if "threads" in r["label"]), results[0])
    cap = threads["capacity"]
    story = pub["offered_rps"] * pub["upstream_latency_s"] / pub["threads_total"]
    facts = {
        "rate_rps": p.rate_rps,
        "capacity": cap,
        "run": threads["label"],
        "delays_s": [normal / 1000, slow / 1000],
        "normal_load": round(p.rate_rps * normal / 1000 / cap, 3),
        "slowdown_load": round(p.rate_rps * slow / 1000 / cap, 3),
        "story_load": round(story, 3),
    }
    said = (
        f"Scaled on purpose with the capacities: the story's {pub['offered_rps']} rps at "
        f"{pub['upstream_latency_s']} s need {story:.2f} of its {pub['threads_total']} threads. "
        f"Here {p.rate_rps:g} rps meet a capacity of {cap} ({threads['label']}): "
        f"{facts['normal_load']:.2f} of it needed at {normal:g} ms and "
        f"{facts['slowdown_load']:.1f}x it at {slow:g} ms, so the slowdown passes capacity as "
        "the story's did."
    )
    return replace(row, explanation=said, evidence=facts)


def explain_busy(p: Protocol, r: dict[str, Any], row: Row) -> Row:
    """A busy fraction far from the story's third, by Little's law: requests in flight are the
    arrival rate times the delay, and the capacity they are divided by is the model's."""
    name, start, end, delay = phase_windows(p)[0]
    seen = samples(r, "inflight", start, end)
    expected = p.rate_rps * delay / 1000
    late = [t for t, _ in seen if t - end > 0.25]  # a second a quarter or more past the phase
    facts = {"rate_rps": p.rate_rps, "delay_s": delay / 1000, "capacity": r["capacity"]}
    facts |= {"expected_inflight": round(expected, 2), "sample_t": [t for t, _ in seen]}
    facts["inflight_samples"] = [v for _, v in seen]
    said = (
        f"Little's law: {p.rate_rps:g} rps x {delay / 1000:g} s = {expected:.1f} requests in "
        f"flight expected; the client counted {mean([v for _, v in seen]):.1f} (per-second "
        f"samples {facts['inflight_samples']}) against a capacity of {r['capacity']}: busy "
        f"fraction {row.measured}."
        + (
            f" {len(late)} of {len(seen)} samples cover part of the slowdown (a second ending "
            f"{max(late) - end:.2g} s after the {name} phase)."
            if late
            else ""
        )
        + (
            f" A third of {r['capacity']} busy would take {r['capacity'] / 3 / delay * 1000:.0f}"
            " rps arriving."
            if r["capacity"] > 3 * expected
            else ""
        )
    )
    return replace(row, explanation=said, evidence=facts)


def phase_rows(p: Protocol, results: list[dict[str, Any]], rows: list[Row]) -> list[dict[str, Any]]:
    """Per run and phase: a throughput row appended to `rows`, and the details table's lines."""
    details = []
    for r in results:
        for name, start, end, delay in phase_windows(p):
            predicted = r["capacity"] / (delay / 1000)
            rps = in_phase(r, "rps", start, end)
            p99 = in_phase(r, "p99_ms", start, end)
            # open loop: the arrival rate, if capacity allows; closed: users / delay at most
            offered = p.rate_rps if "open" in r["label"] else r["users"] / (delay / 1000)
            expected = min(predicted, offered)
            rows.append(
                Row(
                    r["label"],
                    f"{name}: throughput (expected: min(capacity, offered))",
                    "rps",
                    None,
                    round(mean(rps), 1) if rps else "-",
                    f"capacity {r['capacity']} / {delay / 1000:g} s = {predicted:.0f} rps;"
                    f" expected {expected:.0f}; p99 {mean(p99):.0f} ms",
                )
            )
            details.append(
                {
                    "run": r["label"],
                    "phase": name,
                    "delay_ms": delay,
                    "capacity_rps": round(predicted, 1),
                    "rps": round(mean(rps), 1),
                    "p99_ms": round(mean(p99)),
                    "errors": sum(in_phase(r, "errors", start, end)),
                    "dropped": sum(in_phase(r, "dropped", start, end))
                    if "dropped" in r["timeseries"]
                    else "-",
                }
            )
    return details


def conclude(p: Protocol, results: list[dict[str, Any]]) -> str:
    slow_name, slow_start, _, slow_delay = phase_windows(p)[1]
    said = []
    for r in results:
        cap = r["capacity"] / (slow_delay / 1000)
        ts = r["timeseries"]
        after = [v for t, v in zip(ts["t"], ts["p99_ms"], strict=True) if t > slow_start]
        verdict = "below the arrival rate" if cap < p.rate_rps else "above the arrival rate"
        said.append(
            f"{r['label']}: capacity during the {slow_name} {cap:.0f} rps, {verdict}; "
            f"worst per-second p99 from the {slow_name} on {max(after or [0.0]):.0f} ms, "
            f"{sum(r['errors'].values())} errors, {r.get('dropped', 0)} dropped"
        )
    closed = [r for r in results if "closed" in r["label"]]
    tail = (
        (
            " The closed-loop run's latency stays near the upstream delay because its users wait "
            "instead of arriving: it hides the queue the open-loop run shows."
        )
        if closed
        else ""
    )
    return "; ".join(said) + "." + tail


SUMMARY = "upstream slowdown under a constant arrival rate (open loop): threads vs gevent"
