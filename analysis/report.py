"""The run report: plots (PNG and SVG under `report/`) and one self-contained `report.html`.

The HTML embeds every image as base64 and carries its own CSS, so it opens offline, can be mailed
as one file, and never fetches anything. Flagged points stay on every plot with a marker and in
every table with the reason; serialized points and models that failed preflight are drawn but
left out of the verdict.
"""

from __future__ import annotations

import base64
import html
import math
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)
import pandas as pd  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import FuncFormatter  # noqa: E402

from analysis.load import Run, load  # noqa: E402
from analysis.metrics import (
    EXPLAIN,
    best_per_level,
    crossovers,
    flagged,
    point_table,
    unmeasured,
)  # noqa: E402

MARKERS = {  # flag -> (marker, colour, legend text); drawn over the point, largest first
    "serialized": ("X", "red", "serialized (not fair)"),
    "preflight_failed": ("X", "black", "preflight failed"),
    "client_saturated": ("^", "darkorange", "client saturated"),
    "unstable": ("o", "purple", "unstable (spread >= 10%)"),
    "errors": ("s", "crimson", "errors"),
}


@dataclass(frozen=True)
class Plot:
    name: str
    title: str
    caption: str
    png: Path


def write_report(run_dir: Run | Path | str, level: int | None = None) -> Path:
    """Draw every plot and write `report.html`; `level` picks the spectrum's concurrency."""
    run = run_dir if isinstance(run_dir, Run) else load(run_dir)
    table = point_table(run)
    out = run.run_dir / "report"
    out.mkdir(exist_ok=True)
    colours = _colours(table)
    plots = []
    if not table.empty:
        chosen = level if level is not None else _default_level(table)
        figures = [
            ("throughput", "Throughput vs concurrency", _THROUGHPUT, _throughput(table, colours)),
            ("latency", "p50 and p99 vs concurrency", _LATENCY, _latency(table, colours)),
            (
                "spectrum",
                f"Latency percentile spectrum at c={chosen}",
                _SPECTRUM,
                _spectrum(run, table, chosen, colours),
            ),
            ("errors", "Errors by kind", _ERRORS, _errors(table)),
            ("resources", "CPU and memory vs concurrency", _RESOURCES, _resources(table, colours)),
        ]
        for model in sorted(table["model"].unique()):
            figures.append(
                (
                    f"timeseries-{model}",
                    f"Per-second time series: {model}",
                    _TIMESERIES,
                    _timeseries(run, model),
                )
            )
        plots = [_save(fig, out, name, title, caption) for name, title, caption, fig in figures]
    path = run.run_dir / "report.html"
    path.write_text(_html(run, table, plots))
    return path


_THROUGHPUT = (
    "Median throughput over trials with its 95% interval (band). Dashed black: the ideal c/d of a "
    "closed loop (Little's law). Dotted: each model's measured CPU ceiling. Markers show flags."
)
_LATENCY = "Solid: p99, dashed: p50, from histograms merged across trials. Log scale."
_SPECTRUM = (
    "HdrHistogram-style spectrum: latency at each percentile, merged across trials; "
    "the x axis stretches the tail (90%, 99%, 99.9%, ...)."
)
_ERRORS = "Failed requests by kind, summed over trials, per model and concurrency."
_RESOURCES = (
    "Server CPU (whole process tree, 100% = one core), client CPU (dashed) and upstream CPU "
    "(dotted; the grey line marks 90%, where the client counts as saturated); peak server RSS."
)
_TIMESERIES = (
    "Each step's throughput per second (solid, left axis) and p99 per second (dotted, right)."
)


def _colours(table: pd.DataFrame) -> dict[str, str]:
    cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    models = sorted(table["model"].unique()) if not table.empty else []
    return {m: cycle[i % len(cycle)] for i, m in enumerate(models)}


def _default_level(table: pd.DataFrame) -> int:
    """The highest level every model reached, else the highest level of all."""
    per_model = table.groupby("model")["concurrency"].apply(set)
    common = set.intersection(*per_model) if len(per_model) else set()
    return int(max(common) if common else table["concurrency"].max())


def _label(model: str, sub: pd.DataFrame) -> str:
    bad = [
        f
        for f in ("serialized", "preflight_failed", "no_responses")
        if sub["flags"].map(lambda x, f=f: f in x).any()
    ]
    return f"{model} [{', '.join(bad)}]" if bad else model


def _style(sub: pd.DataFrame) -> str:
    """Unfair models keep their line, drawn dashed-dotted so nobody reads them as a result."""
    return "-o" if sub["fair"].all() else "-.o"


def _mark_flags(ax, table: pd.DataFrame, y: str, seen: set[str]) -> None:
    for flag, (marker, colour, text) in MARKERS.items():
        sub = table[table["flags"].map(lambda f, flag=flag: flag in f)].dropna(subset=[y])
        sub = sub[sub[y] > 0]
        if sub.empty:
            continue
        ax.scatter(
            sub["concurrency"],
            sub[y],
            marker=marker,
            s=110,
            facecolors="none",
            edgecolors=colour,
            linewidths=1.6,
            zorder=5,
            label=None if flag in seen else text,
        )
        seen.add(flag)


def _by_model(table: pd.DataFrame):
    for (model, mode), sub in table.groupby(["model", "mode"]):
        yield model, mode, sub.sort_values("concurrency")


def _throughput(table: pd.DataFrame, colours: dict[str, str]) -> Figure:
    fig, ax = plt.subplots(figsize=(9, 5.5))
    for model, mode, sub in _by_model(table):
        c = colours[model]
        suffix = "" if mode == "closed" else f" ({mode})"
        label = _label(model, sub) + suffix
        sub = sub[sub["rps"] > 0]  # a log axis cannot show zero; the label and tables do
        ax.plot(sub["concurrency"], sub["rps"], _style(sub), color=c, label=label)
        band = sub.dropna(subset=["rps_lo", "rps_hi"])
        ax.fill_between(
            band["concurrency"],
            band["rps_lo"].clip(lower=band["rps"] / 20),
            band["rps_hi"],
            color=c,
            alpha=0.2,
            linewidth=0,
        )
        if sub["ceiling_rps"].notna().any():
            ax.axhline(sub["ceiling_rps"].iloc[0], color=c, linestyle=":", linewidth=1)
    ideal = (
        table[["concurrency", "ideal_rps"]].dropna().drop_duplicates().sort_values("concurrency")
    )
    if not ideal.empty:
        ax.plot(ideal["concurrency"], ideal["ideal_rps"], "k--", label="ideal c/d")
    _mark_flags(ax, table, "rps", set())
    _axes(ax, "concurrency (users)", "throughput (ok responses/s)", logy=True)
    return fig


def _latency(table: pd.DataFrame, colours: dict[str, str]) -> Figure:
    fig, ax = plt.subplots(figsize=(9, 5.5))
    for model, _mode, sub in _by_model(table):
        c = colours[model]
        ax.plot(
            sub["concurrency"],
            sub["p99_ms"],
            _style(sub),
            color=c,
            label=f"{_label(model, sub)} p99",
        )
        ax.plot(sub["concurrency"], sub["p50_ms"], "--", color=c, alpha=0.8, label=f"{model} p50")
    _mark_flags(ax, table, "p99_ms", set())
    _axes(ax, "concurrency (users)", "latency (ms)", logy=True)
    return fig


def _spectrum(run: Run, table: pd.DataFrame, level: int, colours: dict[str, str]) -> Figure:
    """Each line stops where its sample runs out: past 1/n of the requests there is only the max."""
    fig, ax = plt.subplots(figsize=(9, 5.5))
    spectra = run.spectra
    at = spectra[spectra["concurrency"] == level]
    reach = 1
    for (model, mode), one in at.groupby(["model", "mode"]):
        sub = table[(table["model"] == model) & (table["mode"] == mode)]
        n = int(one["count"].iloc[0])
        one = one[one["nines"] <= math.log10(n)]
        reach = max(reach, math.ceil(one["nines"].max()))
        ax.plot(one["nines"], one["latency_ms"], color=colours.get(model),
                label=f"{_label(model, sub)} (n={n:,})")  # fmt: skip
    if at.empty:
        ax.text(0.5, 0.5, f"no histograms at c={level}", ha="center", transform=ax.transAxes)
    labels = ["0%", "90%", "99%", "99.9%", "99.99%", "99.999%"][: reach + 1]
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels)
    _axes(ax, "percentile", "latency (ms)", logx=False, logy=True)
    return fig


def _errors(table: pd.DataFrame) -> Figure:
    kinds = [c for c in table if c.startswith("err_") and table[c].sum() > 0]
    fig, ax = plt.subplots(figsize=(9, 4.5))
    if not kinds:
        ax.text(
            0.5,
            0.5,
            "no failed requests in this run",
            ha="center",
            va="center",
            transform=ax.transAxes,
            fontsize=14,
        )
        ax.set_axis_off()
        return fig
    sub = table[table[kinds].sum(axis=1) > 0]
    labels = [f"{m}\nc={c}" for m, c in zip(sub["model"], sub["concurrency"], strict=True)]
    bottom = pd.Series(0.0, index=sub.index)
    for kind in kinds:
        ax.bar(labels, sub[kind], bottom=bottom, label=kind[4:])
        bottom += sub[kind]
    ax.set_ylabel("failed requests")
    ax.tick_params(axis="x", labelsize=8, rotation=45)
    ax.legend(fontsize=8)
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    return fig


def _resources(table: pd.DataFrame, colours: dict[str, str]) -> Figure:
    fig, (cpu, rss) = plt.subplots(1, 2, figsize=(12, 4.8))
    for model, _mode, sub in _by_model(table):
        c = colours[model]
        cpu.plot(sub["concurrency"], sub["server_cpu_pct"], "-o", color=c, label=f"{model} server")
        cpu.plot(
            sub["concurrency"],
            sub["client_cpu_pct"],
            "--",
            color=c,
            alpha=0.7,
            label=f"{model} client",
        )
        if sub["upstream_cpu_pct"].notna().any():
            cpu.plot(sub["concurrency"], sub["upstream_cpu_pct"], ":", color=c, alpha=0.7,
                     label=f"{model} upstream")  # fmt: skip
        rss.plot(sub["concurrency"], sub["server_rss_mb"], "-o", color=c, label=model)
    cpu.axhline(90, color="grey", linestyle=":", linewidth=1)
    _axes(cpu, "concurrency (users)", "CPU % (100 = one core)", logy=False)
    _axes(rss, "concurrency (users)", "server RSS, peak (MB)", logy=False)
    return fig


def _timeseries(run: Run, model: str) -> Figure:
    ts = run.timeseries[run.timeseries["model"] == model]
    levels = sorted(ts["concurrency"].unique()) if not ts.empty else []
    cols = min(max(len(levels), 1), 5)
    rows = max(math.ceil(len(levels) / cols), 1)
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.6 * rows), squeeze=False)
    for ax in axes.flat[len(levels) :]:
        ax.set_axis_off()
    for ax, level in zip(axes.flat, levels, strict=False):
        sub = ts[ts["concurrency"] == level]
        right = ax.twinx()
        for (mode, trial), one in sub.groupby(["mode", "trial"]):
            ax.plot(
                one["second"],
                one["rps"],
                "-",
                label=f"t{trial}" + ("" if mode == "closed" else f" {mode}"),
            )
            right.plot(one["second"], one["p99_ms"], ":", alpha=0.7)
        ax.set_title(f"c={level}", fontsize=9)
        ax.set_ylim(bottom=0)
        right.set_ylim(bottom=0)
        ax.tick_params(labelsize=7)
        right.tick_params(labelsize=7)
        ax.set_xlabel("second", fontsize=7)
        right.set_ylabel("p99 ms (dotted)", fontsize=7)
    axes.flat[0].set_ylabel("rps (solid)", fontsize=8)
    if levels:
        axes.flat[0].legend(fontsize=6, loc="lower left")
    fig.tight_layout()
    return fig


def _axes(ax, xlabel: str, ylabel: str, logx: bool = True, logy: bool = False) -> None:
    plain = FuncFormatter(lambda v, _pos: f"{v:g}")
    if logx:
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(plain)
    if logy:
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(plain)
        ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _pos: _minor(v, ax.get_ylim())))
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    ax.figure.tight_layout()


def _minor(v: float, limits: tuple[float, float]) -> str:
    """Label minor ticks of a log axis: all of them on a short axis, else the 2x, 3x and 5x."""
    if v <= 0:
        return ""
    lo, hi = limits
    lead = round(v / 10 ** math.floor(math.log10(v)), 6)
    return f"{v:g}" if (lo > 0 and hi / lo <= 3) or lead in (2.0, 3.0, 5.0) else ""


def _save(fig: Figure, out: Path, name: str, title: str, caption: str) -> Plot:
    png = out / f"{name}.png"
    fig.savefig(png, dpi=100)
    fig.savefig(out / f"{name}.svg")
    plt.close(fig)
    return Plot(name, title, caption, png)


# ---- HTML ------------------------------------------------------------------------------------

_CSS = """
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1200px;color:#222;padding:0 1em}
h1{font-size:1.6em}h2{border-bottom:1px solid #ccc;padding-bottom:.2em;margin-top:2em}
table{border-collapse:collapse;font-size:.85em;margin:.5em 0}
th,td{border:1px solid #ddd;padding:.25em .5em;text-align:right}th{background:#f4f4f4}
td.l,th.l{text-align:left}td.n{white-space:nowrap}.wide{overflow-x:auto}tr.unfair{background:#fde2e2}tr.warn{background:#fff4d6}
figure{margin:1em 0}figure img{max-width:100%;border:1px solid #eee}
figcaption{font-size:.85em;color:#555}.meta td{text-align:left}.bad{color:#b00;font-weight:bold}
"""


def _html(run: Run, table: pd.DataFrame, plots: list[Plot]) -> str:
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
    parts.append(_meta(m))
    parts.append("<h2>Verdict</h2>" + _verdict(table))
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


def _meta(m: dict) -> str:
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


def _verdict(table: pd.DataFrame) -> str:
    if table.empty:
        return "<p>No step has been measured yet.</p>"
    best = best_per_level(table)
    cross = crossovers(table)
    flags = flagged(table)
    out = [
        _frame(best, list(best.columns))
        if not best.empty
        else "<p class=bad>No fair point: every point is serialized or failed preflight.</p>"
    ]
    if cross.empty:
        out.append("<p>No crossovers: no model overtakes another between measured levels.</p>")
    else:
        lines = [
            f"<li>{'throughput' if r.metric == 'rps' else 'p99'} ({r.mode}): "
            f"<b>{_e(r.overtaker)}</b>"
            f" overtakes {_e(r.overtaken)} between c={r.from_concurrency} and c={r.concurrency}"
            f"{'' if r.clear else ' (within noise)'}</li>"
            for r in cross.itertuples()
        ]
        out.append("<p>Crossovers:</p><ul>" + "".join(lines) + "</ul>")
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


SOURCE_OVERHEAD = (
    "gevent-threading-comparison (2012, 5 ms sleeps, in-process pools): overhead = actual time / "
    "ideal time was about 2.0 for gevent and 1.03 for threads at low N; threads became slower "
    "than gevent at about 80-90 workers. Here the same ratio is ideal rps / measured rps."
)


def _at(row: pd.Series) -> str:
    return f"{fmt(row['overhead'], '{:.2f}')} (c={row['concurrency']})"


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
    ("concurrency", "c", "{}"),
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
    ("p999_ms", "p99.9", "{:.1f}"),
    ("max_ms", "max", "{:.1f}"),
    ("error_rate", "err %", "{:.2%}"),
    ("server_cpu_pct", "srv CPU%", "{:.0f}"),
    ("cpu_ms_per_req", "CPU ms/req", "{:.2f}"),
    ("server_rss_mb", "RSS MB", "{:.0f}"),
    ("rss_per_conn_kb", "KB/conn", "{:.1f}"),
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


def _points(table: pd.DataFrame) -> str:
    if table.empty:
        return "<p>No points.</p>"
    head = "".join(f"<th>{_e(title)}</th>" for _, title, _ in POINT_COLUMNS)
    rows = []
    for rec in table.to_dict("records"):
        cls = "unfair" if not rec["fair"] else ("warn" if rec["flags"] else "")
        cells = "".join(
            f"<td class='l n'>{_e(fmt(rec[k], spec))}</td>"
            if k in ("model", "flags")
            else f"<td>{_e(fmt(rec[k], spec))}</td>"
            for k, _, spec in POINT_COLUMNS
        )
        rows.append(f"<tr class='{cls}'>{cells}</tr>")
    legend = "; ".join(f"{k}: {v}" for k, v in EXPLAIN.items())
    return (
        f"<div class=wide><table><tr>{head}</tr>{''.join(rows)}</table></div>"
        f"<p><small>{_e(legend)}</small></p>"
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
