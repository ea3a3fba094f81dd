"""Per-point metrics of a run: throughput against the ideal, latency, errors, cost.

Where one model overtakes another is `analysis.differences.crossovers`, read from this table.

Definitions (all per point = model x mode x concurrency, trials combined):

- ideal_rps: closed loop, Little's law c / d with d the scenario's mean upstream delay; open loop,
  the target arrival rate.
- ceiling_rps: the model's measured CPU ceiling. At the model's highest-throughput fair point with
  measurable CPU, rps per fully used core = rps / (server_cpu_pct / 100); the ceiling is that times
  the cores the server was seen to use, at least one per process (a CPython process under the GIL
  uses about one; uWSGI's, with kernel and C threads, were seen at 130% each), at most the cores
  given to it; and never below the highest throughput the model measured (whatever its flags):
  what was measured was possible. It assumes cost per request stays flat, so it is an upper
  bound, not a prediction.
- efficiency = rps / min(ideal, ceiling), at most 1: 1.0 means the model got all the I/O
  concurrency or CPU allowed (a throughput a hair over the ideal is noise, not more than all);
  overhead = ideal / rps = actual time / ideal time for the same requests, the
  gevent-threading-comparison metric (1.0 is perfect, their gevent ~2.0, threads ~1.03).
- latency percentiles come from the per-point histogram, merged across trials by adding counts,
  except p99: p99_ms (like rps) is the figure the claims test, the mean of the trials' own p99s,
  read from the run's one set of points (`analysis.points`: the very `Side` the judge, the
  crossovers and the lead compare), so no printed p99 differs from the one a claim rests on;
  the merged histogram's stays beside it as p99_merged_ms.
- cpu_ms_per_req = server CPU time over the window / requests; rss_per_conn_kb = the RSS added per
  extra concurrent connection relative to the model's lowest level (the memory cost of concurrency).
- inferred_inflight: requests inside the server by Little's law, throughput x the unloaded
  service time; seen from outside, so it holds for any app.
- every figure of a point is the mean of its trials, the statistic the one test of difference
  compares (throughput and p99 are those very sides), except the latency percentiles besides p99,
  read from the merged histogram, and the upstream's in-flight count, the highest seen.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from analysis.loading import LATENCY_KEYS, Run
from analysis.points import Point, estimate
from lab.record import hist
from lab.record.flags import excluding, explain, tail_excluding
from lab.record.hist import percentiles_of, seconds_of
from lab.record.step import ERROR_KINDS, StepRecord
from lab.record.thresholds import T
from lab.verdict import capacity


def server_cores(manifest: dict[str, Any], model: str, observed_cpu_pct: float = 0.0) -> float:
    """CPU cores one model's server has and uses, by the verdict's own count
    (`lab.verdict.capacity.server_cores`): cores given to it (the server's pinned cores, else
    every core the run could use), at most one per process (the run's `processes` knob, or the
    model's own), unless it was seen to use more (C threads beside the GIL)."""
    layout = (manifest.get("execution", {}) or {}).get("cpu_layout", {}) or {}
    env = manifest.get("environment", {}) or {}
    given = len(layout.get("server") or env.get("cpus_usable") or []) or env.get("cpus") or 1
    spec = manifest.get("models", {}).get(model) or {}
    processes = (spec.get("knobs") or manifest.get("knobs") or {}).get("processes")
    return capacity.server_cores(
        given, processes if isinstance(processes, int) else None, observed_cpu_pct
    )


def preflight_status(run: Run) -> dict[str, list[str]]:
    """Model -> flags from its preflight rows (one per trial): `serialized`, `preflight_failed`."""
    out: dict[str, list[str]] = {}
    for row in run.preflight.to_dict("records"):
        flags = out.setdefault(str(row.get("model")), [])
        if row.get("serialized") is True and "serialized" not in flags:
            flags.insert(0, "serialized")
        if row.get("ok") is False and "preflight_failed" not in flags:
            flags.append("preflight_failed")
    return out


def unmeasured(run: Run) -> pd.DataFrame:
    """Models the run declared or preflighted but never measured, with the preflight's reason."""
    declared = list(run.manifest.get("models", {})) + list(run.preflight.get("model", []))
    measured = set(run.steps["model"]) if not run.steps.empty else set()
    messages = {str(r.get("model")): r for r in run.preflight.to_dict("records")}
    rows = []
    for model in dict.fromkeys(str(m) for m in declared):
        if model in measured:
            continue
        pre = messages.get(model)
        if pre is None:
            why = "no preflight and no step recorded (not reached yet, or skipped)"
        else:
            flags = ", ".join(preflight_status(run).get(model, [])) or "preflight passed"
            why = f"{flags}: {pre.get('message', '')}".strip(": ")
        rows.append([model, why[:300]])
    return pd.DataFrame(rows, columns=["model", "why"])


def point_table(run: Run) -> pd.DataFrame:
    """One row per point with every metric, its trial statistics and its flags: a rendering of
    the run's points (`Run.points`), each row read from its point and its own steps."""
    if not run.points:
        return pd.DataFrame()
    pre = preflight_status(run)
    rows = [_point_row(run, point, pre.get(point.model, [])) for point in run.points.values()]
    table = pd.DataFrame(rows)
    kinds = [c for c in table if c.startswith("err_")]  # a kind only some points counted: 0
    table[kinds] = table[kinds].fillna(0).astype(int)
    table["ceiling_rps"] = _ceilings(run, table)
    limit = table[["ideal_rps", "ceiling_rps"]].min(axis=1, skipna=True)
    answered = table["ok"] > 0  # a point with no answers is never a ratio
    table["efficiency"] = (table["rps"] / limit.where(limit > 0)).clip(upper=1.0).where(answered)
    table["overhead"] = table["ideal_rps"] / table["rps"].where(table["rps"] > 0)
    table["rss_per_conn_kb"] = _rss_per_conn(table)
    table["fair"] = table["flags"].map(lambda f: not excluding(f))
    table["fair_p99"] = table["flags"].map(lambda f: not tail_excluding(f))
    return table


def export_summary(run: Run, table: pd.DataFrame | None = None) -> list[Path]:
    """Write the point table as `summary.csv` and `summary.parquet` into the run directory."""
    table = point_table(run) if table is None else table
    if not table.empty:
        table = table.assign(
            flags=table["flags"].map(", ".join),
            latency_lower_bounds=table["latency_lower_bounds"].map(", ".join),
        )
    paths = [run.run_dir / "summary.csv", run.run_dir / "summary.parquet"]
    table.to_csv(paths[0], index=False)
    table.to_parquet(paths[1], index=False)
    return paths


def _point_row(run: Run, point: Point, pre_flags: list[str]) -> dict[str, Any]:
    """One point's figures: its throughput (and its interval), p99, trials and flags are the
    point's own, the sides the claims test (`lab.verdict.difference`); the rest are the means of
    its trials, the steps that measured something (`StepRecord.is_trial`): a skipped step adds its
    flags and their evidence, never a zero to a mean or a trial to the count."""
    trials = point.records
    spread = estimate([r.load.throughput_rps for r in trials]).spread
    lo, hi = point.throughput.interval()
    requests = sum(r.load.requests for r in trials)
    level = round(point.level)
    row: dict[str, Any] = {
        "model": point.model,
        "mode": point.mode,
        "concurrency": level,
        "trials": point.trials,
        "rps": point.rps,
        "rps_lo": lo,
        "rps_hi": hi,
        "rps_spread": spread,
        "ci_basis": point.throughput.basis(),  # the test's own label of the interval
        "unstable": "unstable" in point.flags,
        "ideal_rps": _ideal(run, point),
        "requests": requests,
        "ok": sum(r.load.ok for r in trials),
    }
    row.update(_latency(run, (point.model, point.mode, level), trials))
    row["p99_merged_ms"] = row["p99_ms"]
    row["p99_ms"] = row["p99_ms"] if math.isnan(point.p99_ms) else point.p99_ms
    row.update(_every_request(trials))
    errs = {k: sum(r.load.errors.get(k, 0) for r in trials) for k in _error_kinds(point)}
    row.update({f"err_{k}": v for k, v in errs.items()})
    row["errors"] = sum(errs.values())
    row["error_rate"] = row["errors"] / requests if requests else 0.0
    row.update(_resources(trials))
    row.update(_limits_and_cost(trials))
    flags = [*pre_flags, *(f for f in point.flags if f not in pre_flags)]
    if row["ok"] == 0 and "no_responses" not in flags:  # runs from before the core flagged it
        flags.append("no_responses")
    row["flags"] = tuple(flags)
    every = sorted([*trials, *point.skipped], key=lambda r: r.trial)
    row["evidence"] = "; ".join(_evidence(every, spread if row["unstable"] else None))
    return row


def _mean(values: Iterable[float | None]) -> float:
    """The mean of the values measured (None and NaN are not), NaN where none was."""
    measured = [float(v) for v in values if v is not None and not math.isnan(v)]
    return statistics.fmean(measured) if measured else float("nan")


def _resources(trials: Sequence[StepRecord]) -> dict[str, Any]:
    """The trials' means of what the server, the generator and the upstream used (NaN, and -1
    for the upstream's in-flight count, where no trial measured anything); CPU per request by
    the records' one conversion (`StepRecord.ms_per_request`), as the lead's spread reads it."""
    out = {
        "server_cpu_pct": _mean(r.resources.server_cpu_pct for r in trials),
        "cpu_ms_per_req": _mean(r.ms_per_request(r.resources.server_cpu_pct) for r in trials),
        "server_rss_mb": _mean(r.resources.server_rss_mb for r in trials),
        "server_pss_mb": _mean(
            r.resources.server_pss_mb for r in trials
        ),  # 0: not measured (older runs)
        "client_cpu_pct": _mean(r.resources.client_cpu_pct for r in trials),
        "upstream_cpu_pct": _mean(r.resources.upstream_cpu_pct for r in trials),
    }
    out["upstream_max_inflight"] = max((r.load.upstream_max_inflight for r in trials), default=-1)
    out["inferred_inflight"] = _mean(r.load.inferred_inflight for r in trials)  # Little's law
    return out


def _limits_and_cost(trials: Sequence[StepRecord]) -> dict[str, Any]:
    """The most common limit among the trials, and the cost per request the steps recorded
    (nginx's apart, where a front ran, and the app's databases' summed, where the lab started
    any: NaN otherwise)."""
    dbs = [
        sum(r.resources.database_cpu_ms_per_req.values())
        for r in trials
        if r.resources.database_cpu_ms_per_req
    ]
    fronts = [
        r.resources.front_cpu_pct for r in trials if r.resources.front_cpu_pct >= 0
    ]  # -1: no nginx in front
    return {
        "limited_by": _most_common(
            [r.evidence.limited_by for r in trials if r.evidence.limited_by]
        ),
        "latency_lower_bounds": tuple(
            sorted({k for r in trials for k in r.latency.latency_lower_bounds})
        ),
        "apparatus_cpu_ms_per_req": _mean(r.resources.apparatus_cpu_ms_per_req for r in trials),
        "server_rss_kb_per_conn": _mean(r.resources.server_rss_kb_per_conn for r in trials),
        "front_cpu_ms_per_req": _mean(r.resources.front_cpu_ms_per_req for r in trials),
        "database_cpu_ms_per_req": _mean(dbs),
        "front_cpu_pct": _mean(fronts),
    }


def _most_common(names: list[str]) -> str:
    """The most common name, the first in alphabetical order among equals ("" for none): the
    same whatever the order of the trials or the hash seed."""
    return min(set(names), key=lambda n: (-names.count(n), n)) if names else ""


def _every_request(trials: Sequence[StepRecord]) -> dict[str, Any]:
    """p99 over every request (answers, failures, dropped and unfinished ones' lower bounds),
    beside the answers' own: the trials' mean, NaN where the generator did not record it; and
    the share of requests that are not answers (the worst trial's, %)."""
    shares = [r.latency.unanswered_share for r in trials if r.latency.unanswered_share >= 0]
    return {
        "p99_all_ms": _mean(
            r.latency.latency_all_ms["p99"] for r in trials if r.latency.latency_all_ms
        ),
        "p99_all_bound": any("p99" in r.latency.latency_all_lower_bounds for r in trials),
        "unanswered_pct": 100 * max(shares) if shares else float("nan"),
    }


def _error_kinds(point: Point) -> list[str]:
    """The error kinds of the record, then any other kind a step of the point counted."""
    found = {k for r in (*point.records, *point.skipped) for k in r.load.errors}
    return [*ERROR_KINDS, *sorted(found - set(ERROR_KINDS))]


def _ideal(run: Run, point: Point) -> float:
    if point.mode == "open":
        rates = [r.rate_rps for r in point.records if r.rate_rps is not None]
        return float(statistics.median(rates)) if rates else float("nan")
    return round(point.level) / (run.delay_ms / 1000) if run.delay_ms > 0 else float("nan")


def _latency(run: Run, key: tuple[str, str, int], trials: Sequence[StepRecord]) -> dict[str, Any]:
    """Percentiles of the merged histogram; the steps' own summaries only if no .hlog exists."""
    if sum(r.load.ok for r in trials) == 0:  # no successful request: there is no latency to report
        nan = float("nan")
        return {f"{k}_ms": nan for k in LATENCY_KEYS} | {"latency_source": "no successful request"}
    merged = run.histograms.get(key)
    if merged is not None and merged.get_total_count() > 0:
        values, counts = second = seconds_of(merged)  # hdrh's own mean walks every bucket: slow
        quantiles = percentiles_of(second, list(hist.PERCENTILES.values()))
        out = {f"{k}_ms": q for k, q in zip(hist.PERCENTILES, quantiles, strict=True)}
        out |= {
            "max_ms": float(values[-1]),
            "mean_ms": float((values * counts).sum() / counts.sum()),
        }
        return out | {"latency_source": "histogram"}
    nan = float("nan")
    out = {f"{k}_ms": _mean(r.latency.latency_ms.get(k, nan) for r in trials) for k in LATENCY_KEYS}
    highest = [m for r in trials if not math.isnan(m := r.latency.latency_ms.get("max", nan))]
    out["max_ms"] = max(highest, default=nan)
    return out | {"latency_source": "step summary (no histogram)"}


def _evidence(every: Sequence[StepRecord], spread: float | None) -> list[str]:
    notes = []
    for r in every:
        if r.evidence:
            detail = ", ".join(f"{k}={_short(v)}" for k, v in sorted(r.evidence.details.items()))
            notes.append(f"t{r.trial}: {detail}")
    if spread is not None:
        notes.append(f"trial spread {spread:.0%} >= 10%")
    return notes


def _short(value: object) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def _ceilings(run: Run, table: pd.DataFrame) -> pd.Series:
    out = pd.Series(float("nan"), index=table.index)
    for (model, _mode), group in table.groupby(["model", "mode"]):
        usable = group[
            group["flags"].map(lambda f: not excluding(f))
            & (group["server_cpu_pct"] >= T.ceiling_min_server_cpu_pct)
        ]
        if usable.empty:
            continue
        best = usable.loc[usable["rps"].idxmax()]
        per_core = best["rps"] / (best["server_cpu_pct"] / 100)
        used = float(group["server_cpu_pct"].max())
        cpu = per_core * server_cores(run.manifest, str(model), used)
        out[group.index] = max(cpu, float(group.loc[group["ok"] > 0, "rps"].max()))
    return out


def _rss_per_conn(table: pd.DataFrame) -> pd.Series:
    out = pd.Series(float("nan"), index=table.index)
    for _, group in table.groupby(["model", "mode"]):
        base = group.loc[group["concurrency"].idxmin()]
        extra = group["concurrency"] - base["concurrency"]
        out[group.index] = (
            (group["server_rss_mb"] - base["server_rss_mb"]) * 1024 / extra.where(extra > 0)
        )
    return out


def flagged(table: pd.DataFrame) -> pd.DataFrame:
    """Every flagged point with why, for the report and the terminal: nothing is dropped quietly."""
    cols = ["model", "mode", "concurrency", "flags", "why"]
    if table.empty:
        return pd.DataFrame(columns=cols)
    sub = table[table["flags"].map(bool)]
    why = sub.apply(lambda r: _why(r), axis=1) if not sub.empty else pd.Series(dtype=str)
    out = sub.assign(flags=sub["flags"].map(", ".join), why=why)
    return out[cols].reset_index(drop=True)


def _why(row: pd.Series) -> str:
    parts = [explain(f) for f in row["flags"]]
    if row.get("evidence"):
        parts.append(f"evidence: {row['evidence']}")
    return "; ".join(parts)
