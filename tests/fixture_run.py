"""Build small run directories with known values, written by the project's own result code.

The analysis tests need runs whose every number is known in advance, so this writes them with
`lab.record.step.step_record`, `lab.record.rundir.RunDir` and `lab.record.hist` (the `.hlog` writer)
exactly as
a real sweep does, only with chosen values instead of measured ones; `closed_step` builds one
step record by hand and assesses it as the lab does (the verdict tests' shared step).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from lab.record import hist
from lab.record.rundir import RunDir
from lab.record.step import Measured, Raised, Sampled, StepKey, StepRecord, amended, step_record
from lab.verdict.assess import assessed
from lab.verdict.capacity import Capacity

RUN_ID = "fixture"
T0 = 1_700_000_000.0  # start of the first interval, seconds since the epoch
STARTED = "2026-01-01T00:00:00+00:00"


def window(
    rps: float,
    p50: float = 100.0,
    *,
    seconds: float = 10.0,
    errors: dict[str, int] | None = None,
    **more: Any,
) -> Measured:
    """What a generator measured in a window of `seconds`: `rps` answers a second, the `errors`
    beside them, p99 twice p50 unless `latency_ms` is given; the verdict tests' shared step."""
    failed = sum((errors or {}).values())
    figures: dict[str, Any] = {"latency_ms": {"p50": p50, "p99": 2 * p50}, "client_cpu_pct": 20.0}
    answered = round(rps * seconds)
    return Measured(
        STARTED, seconds, answered + failed, answered, errors or {}, **{**figures, **more}
    )


def closed_step(
    users: int,
    rps: float,
    cap: Capacity,
    *,
    p50: float,
    cpu: float,
    raised: tuple[Raised, ...] = (),
    errors: dict[str, int] | None = None,
    client_cpu: float = 20.0,
    **sampled: Any,
) -> StepRecord:
    """A 10 s closed-loop step of `users` as the lab assesses one on `cap`: `rps` answers a
    second, server CPU `cpu` %, `sampled` Sampled's other figures; a raised generator_lag carries
    its lag p99 (40 ms unless its evidence says) into the window, as a generator would report it."""
    measured = window(rps, p50, errors=errors, client_cpu_pct=client_cpu)
    for lag in (r.evidence.get("lag_p99_ms", 40.0) for r in raised if r.flag == "generator_lag"):
        measured = replace(measured, generator_lag_ms={"p99": lag, "max": 2 * lag})
    record = Sampled(**{"server_cpu_pct": cpu, "server_rss_mb": 60, **sampled})
    key = StepKey("m", "closed", users, None, 1)
    return assessed(step_record("run", key, measured, record, raised), cap)


@dataclass(frozen=True)
class FixtureStep:
    """One step to write: `latencies_ms` are recorded in every second of the step."""

    model: str
    concurrency: int
    trial: int = 1
    rps_per_second: tuple[float, ...] = (10.0, 10.0, 10.0)
    latencies_ms: tuple[float, ...] = (100.0,)
    server_cpu_pct: float = 50.0
    server_rss_mb: float = 100.0
    client_cpu_pct: float = 20.0
    errors: dict[str, int] = field(default_factory=dict)
    flags: tuple[str, ...] = ()
    mode: str = "closed"
    write_hlog: bool = True
    limited_by: str = ""  # as lab.verdict would have assessed it; "" = not assessed

    @property
    def seconds(self) -> int:
        return len(self.rps_per_second)

    @property
    def ok(self) -> int:
        return round(sum(self.rps_per_second))

    @property
    def key(self) -> StepKey:
        open_loop = self.mode == "open"
        return StepKey(
            self.model,
            self.mode,
            None if open_loop else self.concurrency,
            float(self.concurrency) if open_loop else None,
            self.trial,
        )

    def to_step(self) -> StepRecord:
        merged = hist.merge(h for _, _, h in self.intervals())
        seconds = [float(i) for i in range(self.seconds)]
        measured = Measured(
            started_at="2023-11-14T22:13:20+00:00",
            duration_s=float(self.seconds),
            requests=self.ok + sum(self.errors.values()),
            ok=self.ok,
            errors=dict(self.errors),
            latency_ms=hist.summary_ms(merged),
            client_cpu_pct=self.client_cpu_pct,
            timeseries={
                "t": seconds,
                "rps": list(self.rps_per_second),
                "errors": [0.0] * len(seconds),
            },
        )
        sampled = Sampled(
            server_cpu_pct=self.server_cpu_pct,
            server_rss_mb=self.server_rss_mb,
            upstream_max_inflight=self.concurrency,
            timeseries={
                "server_cpu_pct": [self.server_cpu_pct] * self.seconds,
                "server_rss_mb": [self.server_rss_mb] * self.seconds,
                "client_cpu_pct": [self.client_cpu_pct] * self.seconds,
            },
        )
        raised = tuple(Raised(f, {"client_cpu_pct": self.client_cpu_pct}) for f in self.flags)
        histogram = RunDir.hlog_relpath(self.key) if self.write_hlog else ""
        record = step_record(RUN_ID, self.key, measured, sampled, raised, histogram=histogram)
        return amended(record, limited_by=self.limited_by)

    def intervals(self) -> list[tuple[float, float, Any]]:
        out = []
        for i in range(self.seconds):
            h = hist.new_histogram()
            for ms in self.latencies_ms:
                hist.record_ms(h, ms)
            out.append((T0 + i, T0 + i + 1, h))
        return out


def build_run(
    run_dir: Path,
    steps: list[FixtureStep],
    delay_ms: float = 100.0,
    preflight: dict[str, dict[str, Any]] | None = None,
    processes: int = 1,
    cpus: int = 2,
) -> Path:
    """Write manifest, preflight, steps and histograms; return the run directory.

    A model named only in `preflight` is declared and preflighted but has no step, like a model
    the lab skipped because its preflight failed.
    """
    models = sorted({s.model for s in steps} | set(preflight or {}))
    levels = sorted({s.concurrency for s in steps})
    run_dir.mkdir(parents=True, exist_ok=True)
    run = RunDir(run_dir)
    run.write_manifest(
        {
            "run_id": RUN_ID,
            "lab_version": "0.1.0",
            "git_sha": "0" * 40,
            "created_at": "2023-11-14T22:13:00+00:00",
            "finished_at": "2023-11-14T22:20:00+00:00",
            "status": "complete",
            "scenario": {
                "name": "fixture",
                "mode": "closed",
                "levels": levels,
                "duration_s": 3,
                "warmup_s": 0,
                "settle_s": 0,
                "trials": max(s.trial for s in steps),
                "route": "/io",
                "delay_ms": delay_ms,
                "distribution": "fixed",
                "models": models,
            },
            "knobs": {"processes": processes, "concurrency": max(levels), "backlog": 2048},
            "models": {
                m: {"description": m, "argv": [m], "env": {}, "capacity": max(levels)}
                for m in models
            },
            "environment": {"python": "3.11", "cpus": cpus, "cpus_usable": list(range(cpus))},
            "execution": {"backend": "native", "cpu_layout": {"server": [], "client": []}},
            "backend": "native",
        },
    )
    for m in models:
        row = {"model": m, "ok": True, "serialized": False, "message": "ok", "trial": 1}
        row.update((preflight or {}).get(m, {}))
        run.append("preflight.jsonl", row)
    for s in steps:
        step = s.to_step()
        if s.write_hlog:
            hist.write_hlog(run_dir / step.histogram, s.intervals())
        run.append_step(step)
    return run_dir
