"""Load a run directory into tidy pandas tables, usable from the CLI, the report or a notebook.

A run may still be in progress or may have crashed mid-write: `steps.jsonl` can end in a truncated
line and an `.hlog` in a half-written interval. Loading keeps everything that was complete and
drops only the broken tail, so a report can be drawn at any moment of a run. (The per-point
metrics table is exported as summary.csv/.parquet by `analysis.metrics.export_summary`.)
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import pandas as pd
from hdrh.histogram import HdrHistogram

from analysis.points import Points, build
from lab.record import hist
from lab.record.errors import LabError
from lab.record.hist import percentiles_of, seconds_of
from lab.record.rundir import RunDir, planned_steps
from lab.record.step import ERROR_KINDS, StepKey, StepRecord, flat
from lab.record.stepparts import outage_seconds

POINT = ["model", "mode", "concurrency"]  # one point of a sweep; trials repeat a point
# An open-loop step's point is its target arrival rate: its `concurrency` (the cap on outstanding
# requests) is the same at every rate, so the loader keys open rows by rate and keeps the cap as
# `max_outstanding`. Plots then put rate where closed-loop runs put users.
LATENCY_KEYS = ("p50", "p90", "p99", "p999", "max", "mean")
SPECTRUM_NINES = tuple(i / 20 for i in range(5 * 20 + 1))  # 0 -> 0%, 1 -> 90%, ..., 5 -> 99.999%
TIMESERIES_KEYS = (
    "rps",
    "errors",
    "server_cpu_pct",
    "server_rss_mb",
    "client_cpu_pct",
    "upstream_cpu_pct",
)


class RunError(Exception):
    """A run directory that cannot be analysed; the message says why, for the CLI to print."""


@dataclass
class Run:
    """Everything one run recorded, as tables. Histograms are merged per point across trials."""

    run_dir: Path
    manifest: dict[str, Any]
    preflight: pd.DataFrame  # one row per model: ok, serialized, message
    steps: pd.DataFrame  # one row per step (model x mode x concurrency x trial)
    timeseries: pd.DataFrame  # one row per second of each step, with per-second p50/p99
    records: list[StepRecord] = field(default_factory=list)  # what the judge reads
    histograms: dict[tuple[str, str, int], HdrHistogram] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)  # lines not read, planned steps not found

    @cached_property
    def points(self) -> Points:
        """The run's points, built once (`analysis.points`): the point table, the claims and
        `lab compare` all read these, never sides of their own."""
        return build(self.records)

    @property
    def spectra(self) -> pd.DataFrame:
        """Tidy percentile spectrum per point: latency at 0%, 90%, 99%, ... 99.999% (x = nines)."""
        rows = []
        ps = [100 * (1 - 10**-x) for x in SPECTRUM_NINES]
        for (model, mode, conc), h in sorted(self.histograms.items()):
            n = h.get_total_count()
            if n:
                values = percentiles_of(seconds_of(h), ps)
                rows += [
                    [model, mode, conc, *xpv, n]
                    for xpv in zip(SPECTRUM_NINES, ps, values, strict=True)
                ]
        return pd.DataFrame(rows, columns=[*POINT, "nines", "percentile", "latency_ms", "count"])

    @property
    def delay_ms(self) -> float:
        return float(self.manifest.get("scenario", {}).get("delay_ms") or 0.0)


def load(run_dir: Path | str) -> Run:
    """Read manifest, preflight, steps and histograms of one run directory."""
    run = RunDir(Path(run_dir))
    if run.path.exists() and not run.path.is_dir():
        raise RunError(
            f"{run.path} is a file, not a run directory: give the directory a `lab run` wrote "
            "(results/<run>, the one holding manifest.json and steps.jsonl)"
        )
    if not run.path.is_dir():
        raise RunError(f"{run.path}: no such run directory")
    try:
        manifest = run.manifest()
    except LabError as exc:
        raise RunError(str(exc)) from None
    if not run.steps_path.exists() and not (run.path / "preflight.jsonl").exists():
        # with a preflight but no step (every model failed it) there is still a story to tell
        raise RunError(f"{run.path}: no steps.jsonl (has this run measured any step yet?)")
    try:
        records = run.standing()
        preflight = pd.DataFrame(run.rows("preflight.jsonl"))
    except LabError as exc:
        raise RunError(str(exc)) from None
    rows = [_row(r) for r in records]
    steps = steps_frame(rows)
    timeseries, histograms = _histograms_and_series(run.path, rows)
    if preflight.empty:
        preflight = pd.DataFrame(columns=["model", "ok", "serialized", "message"])
    problems = run.unreadable() + _not_found(manifest, {r.key for r in records})
    return Run(run.path, manifest, preflight, steps, timeseries, records, histograms, problems)


def _not_found(manifest: dict[str, Any], recorded: set[StepKey]) -> list[str]:
    """Planned steps with no record: each by name in a complete run; a count in one that is
    still running or was stopped (their absence is expected there)."""
    missing = [k for k in planned_steps(manifest) if k not in recorded]
    if not missing:
        return []
    status = manifest.get("status")
    if status != "complete":
        return [f"{len(missing)} planned step(s) not measured: the run is {status}"]
    return [f"planned but not recorded: {k.model} {k.label} trial {k.trial}" for k in missing]


def _row(record: StepRecord) -> dict[str, Any]:
    """A record as a table row. `concurrency` is the point's position on the sweep's axis:
    users in closed loop, the arrival rate in open loop (the cap stays `max_outstanding`)."""
    row = flat(record)
    row["concurrency"] = round(record.key.level)
    return row


def steps_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """Flatten step objects: latency_ms.p99 -> p99_ms, errors.timeout -> err_timeout."""
    flat = []
    for r in rows:
        latency = r.get("latency_ms") or {}
        errors = r.get("errors") or {}
        row = {k: v for k, v in r.items() if k not in ("latency_ms", "errors", "timeseries")}
        row.update({f"{k}_ms": float(latency.get(k, float("nan"))) for k in LATENCY_KEYS})
        kinds = sorted(set(ERROR_KINDS) | set(errors))
        row.update({f"err_{k}": int(errors.get(k, 0)) for k in kinds})
        row["errors_total"] = int(sum(errors.values()))
        row["flags"] = tuple(r.get("flags") or ())
        flat.append(row)
    frame = pd.DataFrame(flat)
    if frame.empty:
        return pd.DataFrame(columns=[*POINT, "trial", "throughput_rps", "flags"])
    for col, default in (("rate_rps", None), ("histogram", ""), ("upstream_cpu_pct", float("nan"))):
        if col not in frame:  # fields added to the step after some runs were recorded
            frame[col] = default
    err_cols = [c for c in frame if c.startswith("err_")]
    frame[err_cols] = frame[err_cols].fillna(0).astype(int)
    return frame.sort_values([*POINT, "trial"], kind="stable").reset_index(drop=True)


def read_hlog_safe(path: Path) -> Iterator[HdrHistogram]:
    """Yield the complete intervals of an `.hlog`, stopping quietly at a half-written one."""
    if not path.exists():
        return
    try:
        yield from hist.read_hlog(path)
    except (ValueError, TypeError, IndexError, EOFError, OSError):  # binascii.Error is ValueError
        return


def _histograms_and_series(
    run_dir: Path, rows: list[dict[str, Any]]
) -> tuple[pd.DataFrame, dict[tuple[str, str, int], HdrHistogram]]:
    """Per-second rows from each step's time series, plus per-second p50/p99 from its `.hlog`.

    The step's histograms are also merged per point across trials (counts added, never
    percentiles averaged) so percentiles of a point use every request of every trial.
    """
    merged: dict[tuple[str, str, int], HdrHistogram] = {}
    records: list[dict[str, Any]] = []
    for r in rows:
        key = (r["model"], r["mode"], int(r["concurrency"]))
        every = list(read_hlog_safe(run_dir / r["histogram"])) if r.get("histogram") else []
        intervals = [h for h in every if h.get_tag() != hist.DRAIN_TAG]  # measured seconds
        compact = [seconds_of(h) for h in intervals]
        if every:
            merged.setdefault(key, hist.new_histogram())
            for h in every:  # the drain's latencies too: they are the window's requests
                merged[key].add(h)
        series = r.get("timeseries") or {}
        outage = set(outage_seconds(r.get("flags") or (), r.get("details") or {}))
        n = max([len(v or []) for v in series.values()] + [len(intervals)])
        for i in range(n):
            rec: dict[str, Any] = {
                "model": key[0],
                "mode": key[1],
                "concurrency": key[2],
                "trial": int(r.get("trial", 0)),
                "second": i,
                "outage": i in outage,  # the verdict's `stalled` seconds: an event, not noise
            }
            t = series.get("t") or []
            rec["t"] = float(t[i]) if i < len(t) else float(i)
            for k in TIMESERIES_KEYS:
                values = series.get(k) or []
                rec[k] = float(values[i]) if i < len(values) else float("nan")
            second = compact[i] if i < len(compact) else None
            if second is not None and second[1].sum() > 0:
                rec["p50_ms"], rec["p99_ms"] = percentiles_of(second, (50, 99))
            else:  # no .hlog interval: the worker's own per-second figures, if any
                for name in ("p50_ms", "p99_ms"):
                    values = series.get(name) or []
                    rec[name] = float(values[i]) if i < len(values) else float("nan")
            records.append(rec)
    return pd.DataFrame(records), merged
