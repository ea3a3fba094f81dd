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
from pathlib import Path
from typing import Any

import pandas as pd

from analysis.loading import LATENCY_KEYS, POINT, Run
from analysis.points import Point
from analysis.stats import estimate, percentiles_of, seconds_of
from lab.record import hist
from lab.record.flags import excluding, explain, tail_excluding
from lab.record.step import ERROR_KINDS
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
    """One row per point with every metric, its trial statistics and its flags."""
    steps = run.steps
    if steps.empty:
        return pd.DataFrame()
    pre = preflight_status(run)
    rows = []
    for key, group in steps.groupby(POINT, sort=True):
        point = run.points[(str(key[0]), str(key[1]), int(key[2]))]
        rows.append(_point_row(run, key, group, pre.get(str(key[0]), []), point))
    table = pd.DataFrame(rows)
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


def _point_row(
    run: Run,
    key: tuple[Any, ...],
    group: pd.DataFrame,
    pre_flags: list[str],
    point: Point,
) -> dict[str, Any]:
    """One point's figures: its throughput (and its interval), p99, trials and flags are the
    run's `Point`'s, the sides the claims test (`lab.verdict.difference`); the rest are the
    means of its trials, the steps that measured something (`StepRecord.is_trial`): a skipped
    step adds its flags and their evidence, never a zero to a mean or a trial to the count."""
    model, mode, conc = key[0], key[1], int(key[2])
    every, group = group, group[group["status"] != "skipped"]
    spread = estimate(group["throughput_rps"].tolist()).spread
    lo, hi = point.throughput.interval()
    requests = int(group["requests"].sum())
    row: dict[str, Any] = {
        "model": model,
        "mode": mode,
        "concurrency": conc,
        "trials": point.trials,
        "rps": point.rps,
        "rps_lo": lo,
        "rps_hi": hi,
        "rps_spread": spread,
        "ci_basis": point.throughput.basis(),  # the test's own label of the interval
        "unstable": "unstable" in point.flags,
        "ideal_rps": _ideal(run, mode, conc, group),
        "requests": requests,
        "ok": int(group["ok"].sum()),
    }
    row.update(_latency(run, key, group))
    row["p99_merged_ms"] = row["p99_ms"]
    row["p99_ms"] = row["p99_ms"] if math.isnan(point.p99_ms) else point.p99_ms
    row.update(_every_request(group))
    errs = {k: int(group[f"err_{k}"].sum()) for k in _error_kinds(group)}
    row.update({f"err_{k}": v for k, v in errs.items()})
    row["errors"] = sum(errs.values())
    row["error_rate"] = row["errors"] / requests if requests else 0.0
    row.update(_resources(group, point))
    row.update(_limits_and_cost(group))
    flags = [*pre_flags, *(f for f in point.flags if f not in pre_flags)]
    if row["ok"] == 0 and "no_responses" not in flags:  # runs from before the core flagged it
        flags.append("no_responses")
    row["flags"] = tuple(flags)
    row["evidence"] = "; ".join(_evidence(every, spread if row["unstable"] else None))
    return row


def _resources(group: pd.DataFrame, point: Point) -> dict[str, Any]:
    """The trials' means of what the server, the generator and the upstream used (NaN, and -1
    for the upstream's in-flight count, where no trial measured anything); CPU per request by
    the records' one conversion (`StepRecord.ms_per_request`), as the lead's spread reads it."""
    per_req = [r.ms_per_request(r.server_cpu_pct) for r in point.records]
    counted = [x for x in per_req if x is not None]
    out = {"server_cpu_pct": float(group["server_cpu_pct"].mean())}
    out["cpu_ms_per_req"] = statistics.fmean(counted) if counted else float("nan")
    for col in ("server_rss_mb", "server_pss_mb", "client_cpu_pct", "upstream_cpu_pct"):
        out[col] = float(group[col].mean())  # server_pss_mb 0: not measured (older runs)
    out["upstream_max_inflight"] = int(group["upstream_max_inflight"].max()) if len(group) else -1
    out["inferred_inflight"] = float(group["inferred_inflight"].mean())  # Little's law
    return out


def _limits_and_cost(group: pd.DataFrame) -> dict[str, Any]:
    """The most common limit among the trials, and the cost per request the steps recorded
    (nginx's apart, where a front ran, and the app's databases' summed, where the lab started
    any: NaN otherwise)."""
    limits = [str(x) for x in group.get("limited_by", pd.Series(dtype=str)) if x]
    bounds = {k for ks in group.get("latency_lower_bounds", pd.Series(dtype=object)) for k in ks}
    out: dict[str, Any] = {
        "limited_by": _most_common(limits),
        "latency_lower_bounds": tuple(sorted(bounds)),
    }
    for col in ("apparatus_cpu_ms_per_req", "server_rss_kb_per_conn", "front_cpu_ms_per_req"):
        values = pd.to_numeric(group.get(col, pd.Series(dtype=float)), errors="coerce")
        out[col] = float(values.mean()) if values.notna().any() else float("nan")
    dbs = [sum(d.values()) for d in group.get("database_cpu_ms_per_req", ()) if d]
    out["database_cpu_ms_per_req"] = float(statistics.fmean(dbs)) if dbs else float("nan")
    front = pd.to_numeric(group.get("front_cpu_pct", pd.Series(dtype=float)), errors="coerce")
    front = front.where(front >= 0)  # -1: no nginx in front of this model
    out["front_cpu_pct"] = float(front.mean()) if front.notna().any() else float("nan")
    return out


def _most_common(names: list[str]) -> str:
    """The most common name, the first in alphabetical order among equals ("" for none): the
    same whatever the order of the trials or the hash seed."""
    return min(set(names), key=lambda n: (-names.count(n), n)) if names else ""


def _every_request(group: pd.DataFrame) -> dict[str, Any]:
    """p99 over every request (answers, failures, dropped and unfinished ones' lower bounds),
    beside the answers' own: the trials' mean, NaN where the generator did not record it; and
    the share of requests that are not answers (the worst trial's, %)."""
    every = [d["p99"] for d in group.get("latency_all_ms", ()) if isinstance(d, dict) and d]
    shares = [s for s in group.get("unanswered_share", ()) if s >= 0]
    bounds = group.get("latency_all_lower_bounds", ())
    return {
        "p99_all_ms": float(pd.Series(every).mean()) if every else float("nan"),
        "p99_all_bound": any("p99" in b for b in bounds),
        "unanswered_pct": 100 * max(shares) if shares else float("nan"),
    }


def _error_kinds(group: pd.DataFrame) -> list[str]:
    extra = sorted(c[4:] for c in group if c.startswith("err_") and c[4:] not in ERROR_KINDS)
    return [*ERROR_KINDS, *extra]


def _ideal(run: Run, mode: str, conc: int, group: pd.DataFrame) -> float:
    if mode == "open":
        rate = group["rate_rps"].dropna()
        return float(rate.median()) if len(rate) else float("nan")
    return conc / (run.delay_ms / 1000) if run.delay_ms > 0 else float("nan")


def _latency(run: Run, key: tuple[Any, ...], group: pd.DataFrame) -> dict[str, Any]:
    """Percentiles of the merged histogram; the steps' own summaries only if no .hlog exists."""
    if int(group["ok"].sum()) == 0:  # no successful request: there is no latency to report
        nan = float("nan")
        return {f"{k}_ms": nan for k in LATENCY_KEYS} | {"latency_source": "no successful request"}
    merged = run.histograms.get((key[0], key[1], int(key[2])))
    if merged is not None and merged.get_total_count() > 0:
        values, counts = second = seconds_of(merged)  # hdrh's own mean walks every bucket: slow
        quantiles = percentiles_of(second, list(hist.PERCENTILES.values()))
        out = {f"{k}_ms": q for k, q in zip(hist.PERCENTILES, quantiles, strict=True)}
        out |= {
            "max_ms": float(values[-1]),
            "mean_ms": float((values * counts).sum() / counts.sum()),
        }
        return out | {"latency_source": "histogram"}
    cols = ("p50", "p90", "p99", "p999", "max", "mean")
    out = {
        f"{k}_ms": float(group[f"{k}_ms"].max() if k == "max" else group[f"{k}_ms"].mean())
        for k in cols
    }
    return out | {"latency_source": "step summary (no histogram)"}


def _evidence(group: pd.DataFrame, spread: float | None) -> list[str]:
    notes = []
    for rec in group.to_dict("records"):
        ev = rec.get("evidence")
        if isinstance(ev, dict) and ev:
            detail = ", ".join(f"{k}={_short(v)}" for k, v in sorted(ev.items()))
            notes.append(f"t{rec['trial']}: {detail}")
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
