"""The run report: one self-contained `report.html` over the figures of `analysis.plots`.

The HTML embeds every image as base64 and carries its own CSS, so it opens offline, can be mailed
as one file, and never fetches anything. Every flagged point is listed with its reason;
serialized models are shown but left out of the verdict.
"""

from __future__ import annotations

import base64
import html
import math
from pathlib import Path
from typing import Any

import pandas as pd

from analysis.claims import Claims, claims
from analysis.loading import Run, load
from analysis.metrics import flagged, point_table, unmeasured
from analysis.plots import Plot, draw_all
from analysis.profiles.flame import flames_html
from analysis.routes import routes_html
from lab.record.flags import FLAGS
from lab.record.step import level_label
from lab.verdict.limits import LIMITS


def write_report(
    run_dir: Run | Path | str,
    level: int | None = None,
    table: pd.DataFrame | None = None,
    said: Claims | None = None,
) -> Path:
    """Draw every figure and write `report.html`; `level` picks the spectrum's concurrency.

    `table` is the run's point table and `said` its claims when the caller already has them
    (`lab report` passes the very claims the terminal printed, so the two cannot drift).
    """
    run = run_dir if isinstance(run_dir, Run) else load(run_dir)
    table = point_table(run) if table is None else table
    plots = draw_all(run, table, run.run_dir / "report", level)
    path = run.run_dir / "report.html"
    if said is None and not table.empty:
        said = claims(run, table)
    path.write_text(_html(run, table, plots, said))
    return path


HOW_TO_READ = (
    "How to read this: in a closed loop of c users and an upstream delay d, no server can beat "
    "c/d requests per second (the ideal line); a model's efficiency is its throughput over that "
    "ideal or its measured CPU ceiling, whichever is lower (1.0 = nothing lost). Throughput and "
    "p99 are the mean over trials (the figures every claim tests), throughput with a 95% "
    "interval; the other latency percentiles come from every request of every trial. Flagged "
    "points stay in every plot and table; serialized models are drawn but are not part of the "
    "verdict."
)

_CSS = """
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1200px;color:#222;padding:0 1em}
h1{font-size:1.6em}h2{border-bottom:1px solid #ccc;padding-bottom:.2em;margin-top:2em}
table{border-collapse:collapse;font-size:.85em;margin:.5em 0}
th,td{border:1px solid #ddd;padding:.25em .5em;text-align:right}th{background:#f4f4f4}
td.l,th.l{text-align:left}td.n{white-space:nowrap}.wide{overflow-x:auto}tr.unfair{background:#fde2e2}tr.warn{background:#fff4d6}
figure{margin:1em 0}figure img{max-width:100%;border:1px solid #eee}
figcaption{font-size:.85em;color:#555}.meta td{text-align:left}.bad{color:#b00;font-weight:bold}
"""


def _html(run: Run, table: pd.DataFrame, plots: list[Plot], said: Claims | None) -> str:
    m = run.manifest
    scen = m.get("scenario", {})
    status = m.get("status", "?")
    parts = [
        "<!doctype html><html lang=en><head><meta charset=utf-8>",
        f"<title>concurrency-lab report {_e(m.get('run_id', run.run_dir.name))}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>concurrency-lab: run {_e(m.get('run_id', run.run_dir.name))}</h1>",
    ]
    if status != "complete":
        parts.append(
            f"<p class=bad>Run status: {_e(status)} (the report shows what was measured).</p>"
        )
    if run.problems:
        items = "".join(f"<li>{_e(p)}</li>" for p in run.problems)
        parts.append(f"<p class=bad>Records not read or not found:</p><ul>{items}</ul>")
    parts.append(_meta(m))
    parts.append(f"<p>{_e(HOW_TO_READ)}</p>")
    parts.append("<h2>Verdict</h2>" + _ranking(table, said))
    missing = unmeasured(run)
    if not missing.empty:
        parts.append(
            "<p class=bad>Models with no measured step:</p>" + _frame(missing, ["model", "why"])
        )
    for plot in plots:
        data = base64.b64encode(plot.png.read_bytes()).decode()
        parts.append(
            f"<h2>{_e(plot.title)}</h2><figure><img alt='{_e(plot.title)}' "
            f"src='data:image/png;base64,{data}'><figcaption>{_e(plot.caption)} "
            f"(also <code>report/{plot.name}.svg</code>)</figcaption></figure>"
        )
    parts.append("<h2>Against the source experiment</h2>" + _overhead(table))
    parts.append("<h2>All points</h2>" + _points(table))
    parts.append(routes_html(run.records, run.run_dir))  # a traffic mix, route by route
    parts.append(flames_html(run.records, run.run_dir))  # where each profiled step's CPU went
    parts.append(
        "<h2>Preflight</h2>" + _frame(run.preflight, ["model", "ok", "serialized", "message"])
    )
    parts.append(
        f"<p><small>scenario {_e(scen.get('name', '?'))}; definitions of every metric: "
        "<code>analysis/metrics.py</code>.</small></p></body></html>"
    )
    return "\n".join(parts)


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _meta(m: dict[str, Any]) -> str:
    scen = m.get("scenario", {})
    env = m.get("environment", {})
    rows = [
        ("scenario", scen.get("name")),
        ("mode", scen.get("mode")),
        ("levels", scen.get("levels")),
        ("duration / warm-up (s)", f"{scen.get('duration_s')} / {scen.get('warmup_s')}"),
        ("trials", scen.get("trials")),
        (
            "route, upstream delay d",
            f"{scen.get('route')}, {scen.get('delay_ms')} ms ({scen.get('distribution')})",
        ),
        ("models", ", ".join(m.get("models", {}))),
        ("python, cpus, kernel", f"{env.get('python')}, {env.get('cpus')}, {env.get('kernel')}"),
        ("git sha, backend", f"{m.get('git_sha')}, {m.get('backend')}"),
        ("started, finished", f"{m.get('created_at')}, {m.get('finished_at')}"),
    ]
    body = "".join(f"<tr><th class=l>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in rows)
    return f"<table class=meta>{body}</table>"


def _ranking(table: pd.DataFrame, said: Claims | None) -> str:
    if table.empty or said is None:
        return "<p>No step has been measured yet.</p>"
    flags = flagged(table)
    rankings = [f"<li>{_e(line)}</li>" for line in said.ranking]
    limits = [f"<li>{_e(line)}</li>" for line in said.limits]
    instrument = [f"<li>{_e(line)}</li>" for line in said.instrument]
    answer = [f"<li>{_e(line)}</li>" for line in said.answer]
    out = [
        f"<p>For your app:</p><ul class=answer>{''.join(answer)}</ul>" if answer else "",
        f"<ul>{''.join(rankings)}</ul>",
        f"<p>What limits each model:</p><ul>{''.join(limits)}</ul>",
        f"<p>The load generator itself:</p><ul>{''.join(instrument)}</ul>" if instrument else "",
    ]
    cross = said.crossings
    if cross.empty:
        out.append("<p>No crossovers: no model overtakes another between measured levels.</p>")
    else:
        clear, noisy = cross[cross["clear"]], cross[~cross["clear"]]
        out.append(f"<p>Crossovers: {_e(said.crossing_count)}.</p>")
        if len(clear):
            out.append(f"<p>Crossovers beyond noise:</p><ul>{_crossings(clear)}</ul>")
        if len(noisy):
            out.append(
                f"<details><summary>{len(noisy)} more crossover(s) within noise, or not "
                f"tested</summary><ul>{_crossings(noisy)}</ul></details>"
            )
    if flags.empty:
        out.append("<p>No flagged points.</p>")
    else:
        out.append("<p>Flagged points (kept in every plot and table):</p>")
        out.append(_frame(flags, list(flags.columns)))
    unfair = table[~table["fair"]]
    if not unfair.empty:
        names = ", ".join(sorted(unfair["model"].unique()))
        out.append(f"<p class=bad>Excluded from the verdict (not a fair result): {_e(names)}.</p>")
    return "".join(out)


def _crossings(cross: pd.DataFrame) -> str:
    return "".join(
        f"<li>{'throughput' if r.metric == 'rps' else 'p99'} ({r.mode}): <b>{_e(r.overtaker)}</b>"
        f" overtakes {_e(r.overtaken)} between {r.from_concurrency} and "
        f"{level_label(r.concurrency)}</li>"
        for r in cross.itertuples()
    )


SOURCE_OVERHEAD = (
    "gevent-threading-comparison (2012, 5 ms sleeps, in-process pools): overhead = actual time / "
    "ideal time was about 2.0 for gevent and 1.03 for threads at low N; threads became slower "
    "than gevent at about 80-90 workers. Here the same ratio is ideal rps / measured rps."
)


def _at(row: pd.Series) -> str:
    return f"{fmt(row['overhead'], '{:.2f}')} ({level_label(row['concurrency'])})"


def _overhead(table: pd.DataFrame) -> str:
    """Overhead per model at its lowest and highest level, beside the published figures."""
    if table.empty:
        return f"<p>{_e(SOURCE_OVERHEAD)}</p>"
    rows = []
    for (model, mode), sub in table.groupby(["model", "mode"]):
        sub = sub.sort_values("concurrency")
        low, high = sub.iloc[0], sub.iloc[-1]
        rows.append(
            {
                "model": model if sub["fair"].all() else f"{model} (not fair)",
                "mode": mode,
                "overhead at lowest c": _at(low),
                "overhead at highest c": _at(high),
            }
        )
    frame = pd.DataFrame(rows)
    return f"<p>{_e(SOURCE_OVERHEAD)}</p>" + _frame(frame, list(frame.columns))


POINT_COLUMNS = [
    ("model", "model", "{}"),
    ("concurrency", "users", "{}"),
    ("trials", "trials", "{}"),
    ("rps", "rps", "{:.1f}"),
    ("rps_lo", "95% lo", "{:.1f}"),
    ("rps_hi", "95% hi", "{:.1f}"),
    ("ideal_rps", "ideal", "{:.1f}"),
    ("ceiling_rps", "ceiling", "{:.0f}"),
    ("efficiency", "eff.", "{:.2f}"),
    ("overhead", "overhead", "{:.2f}"),
    ("p50_ms", "p50 ms", "{:.1f}"),
    ("p90_ms", "p90", "{:.1f}"),
    ("p99_ms", "p99", "{:.1f}"),
    ("p99_all_ms", "p99 all", "{:.1f}"),
    ("p999_ms", "p99.9", "{:.1f}"),
    ("max_ms", "max", "{:.1f}"),
    ("error_rate", "err %", "{:.2%}"),
    ("server_cpu_pct", "srv CPU%", "{:.0f}"),
    ("cpu_ms_per_req", "CPU ms/req", "{:.2f}"),
    ("apparatus_cpu_ms_per_req", "lab CPU ms/req", "{:.2f}"),
    ("front_cpu_pct", "nginx CPU%", "{:.0f}"),
    ("front_cpu_ms_per_req", "nginx ms/req", "{:.2f}"),
    ("database_cpu_ms_per_req", "db ms/req", "{:.2f}"),
    ("server_pss_mb", "PSS MB", "{:.0f}"),
    ("server_rss_mb", "RSS MB", "{:.0f}"),
    ("server_rss_kb_per_conn", "KB/conn", "{:.1f}"),
    ("inferred_inflight", "in flight", "{:.1f}"),
    ("limited_by", "limited by", "{}"),
    ("client_cpu_pct", "cli CPU%", "{:.0f}"),
    ("upstream_cpu_pct", "up CPU%", "{:.0f}"),
    ("flags", "flags", "{}"),
]


def fmt(value: object, spec: str) -> str:
    if isinstance(value, tuple):
        return ", ".join(value)
    if isinstance(value, float) and math.isnan(value):
        return "-"
    try:
        return spec.format(value)
    except (ValueError, TypeError):
        return str(value)


# Columns shown only where a step measured them: nginx in front, the app's databases.
OPTIONAL = {
    "front_cpu_pct": "front_cpu_pct",
    "front_cpu_ms_per_req": "front_cpu_pct",
    "database_cpu_ms_per_req": "database_cpu_ms_per_req",
}


def _shown(table: pd.DataFrame, column: str) -> bool:
    """Whether the points table shows `column`: always, unless it is optional and no point
    measured what it depends on."""
    needs = OPTIONAL.get(column)
    return needs is None or (needs in table and bool(table[needs].notna().any()))


def _points(table: pd.DataFrame) -> str:
    if table.empty:
        return "<p>No points.</p>"
    columns = [c for c in POINT_COLUMNS if _shown(table, c[0])]
    head = "".join(f"<th>{_e(title)}</th>" for _, title, _ in columns)
    rows = []
    for rec in table.to_dict("records"):
        cls = "unfair" if not rec["fair"] else ("warn" if rec["flags"] else "")
        cells = "".join(
            f"<td class='l n'>{_e(fmt(rec[k], spec))}</td>"
            if k in ("model", "flags", "limited_by")
            else f"<td>{_e(_bound(rec, k) + fmt(rec[k], spec))}</td>"
            for k, _, spec in columns
        )
        rows.append(f"<tr class='{cls}'>{cells}</tr>")
    return f"<div class=wide><table><tr>{head}</tr>{''.join(rows)}</table></div>" + _legend()


def _bound(rec: dict[str, Any], key: str) -> str:
    """'≥' on an open-loop percentile that counts unfinished (or, over every request, dropped)
    requests' lower bounds."""
    if key == "p99_all_ms":
        return "≥" if rec.get("p99_all_bound") else ""
    return "≥" if key.endswith("_ms") and key[:-3] in rec.get("latency_lower_bounds", ()) else ""


def _legend() -> str:
    """Every flag and every limit the lab can name, from their registries."""
    flags = "".join(
        f"<tr><td class=l><code>{_e(f.name)}</code></td><td class=l>{_e(f.meaning)}</td>"
        f"<td class=l>{'yes' if f.excludes else 'no'}</td></tr>"
        for f in FLAGS.values()
    )
    limits = "".join(
        f"<tr><td class=l><code>{_e(name)}</code></td><td class=l>{_e(meaning)}</td></tr>"
        for name, meaning in LIMITS.items()
    )
    return (
        "<h3>What the flags mean</h3><table><tr><th class=l>flag</th><th class=l>meaning</th>"
        f"<th class=l>excluded from the verdict</th></tr>{flags}</table>"
        "<h3>What limited_by means</h3><table><tr><th class=l>limited_by</th>"
        f"<th class=l>meaning</th></tr>{limits}</table>"
    )


def _frame(frame: pd.DataFrame, cols: list[str]) -> str:
    if frame.empty:
        return "<p>none recorded</p>"
    cols = [c for c in cols if c in frame]
    head = "".join(f"<th class=l>{_e(c)}</th>" for c in cols)
    body = "".join(
        "<tr>" + "".join(f"<td class=l>{_e(fmt(r[c], '{}'))}</td>" for c in cols) + "</tr>"
        for r in frame.to_dict("records")
    )
    return f"<table><tr>{head}</tr>{body}</table>"
