"""The report's figures, drawn with matplotlib (Agg) and saved as PNG and SVG.

Flagged points stay on every plot with a marker; serialized models keep their line, drawn
dashed-dotted and named as such in the legend. Log axes never get zeros: a model with no
throughput is still named in the legend and in every table.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)
import pandas as pd  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import FuncFormatter  # noqa: E402

from analysis.loading import Run  # noqa: E402
from lab.record.step import level_label  # noqa: E402

MARKERS = {  # flag -> (marker, colour, legend text); drawn over the point, largest first
    "serialized": ("X", "red", "serialized (not fair)"),
    "preflight_failed": ("X", "black", "preflight failed"),
    "client_saturated": ("^", "darkorange", "client saturated"),
    "host_busy": ("D", "grey", "host busy (disturbed)"),
    "unstable": ("o", "purple", "unstable (spread >= 10%)"),
    "errors": ("s", "crimson", "errors"),
}


@dataclass(frozen=True)
class Plot:
    """One saved figure: the report embeds the PNG; the SVG sits beside it for print."""

    name: str
    title: str
    caption: str
    png: Path


_THROUGHPUT = (
    "Throughput, the mean of the trials (the figure every claim tests), with its 95% interval "
    "(band). Dashed black: the ideal c/d of a "
    "closed loop (Little's law). Dotted: each model's measured CPU ceiling. Markers show flags."
)
_LATENCY = (
    "Solid: p99, the mean of the trials' own (the figure every claim tests); dashed: p50, from "
    "the histograms merged across trials. Log scale."
)
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


def _mark_flags(ax: Axes, table: pd.DataFrame, y: str, seen: set[str]) -> None:
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


def _by_model(table: pd.DataFrame) -> Iterator[tuple[str, str, pd.DataFrame]]:
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
    if table["ceiling_rps"].notna().any():
        ax.plot([], [], color="grey", linestyle=":", label="CPU ceiling (model's colour)")
    _mark_flags(ax, table, "rps", set())
    _axes(ax, "concurrency (users)", "throughput (ok responses/s)", _levels(table), logy=True)
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
    _axes(ax, "concurrency (users)", "latency (ms)", _levels(table), logy=True)
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
        ax.plot(
            one["nines"],
            one["latency_ms"],
            color=colours.get(model),
            label=f"{_label(model, sub)} (n={n:,})",
        )
    if at.empty:
        ax.text(
            0.5, 0.5, f"no histograms at {level_label(level)}", ha="center", transform=ax.transAxes
        )
    labels = ["0%", "90%", "99%", "99.9%", "99.99%", "99.999%"][: reach + 1]
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels)
    _axes(ax, "percentile", "latency (ms)", logy=True)
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
    labels = [
        f"{m}\n{level_label(c)}" for m, c in zip(sub["model"], sub["concurrency"], strict=True)
    ]
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


# Each model's CPU lines: whose CPU, line style, alpha (the server's drawn solid, in front).
CPU_LINES = (("server", "-o", None), ("client", "--", 0.7), ("upstream", ":", 0.7))


def _resources(table: pd.DataFrame, colours: dict[str, str]) -> Figure:
    fig, (cpu, rss) = plt.subplots(1, 2, figsize=(12, 4.8))
    for model, _mode, sub in _by_model(table):
        c = colours[model]
        for who, style, alpha in CPU_LINES:
            y = sub[f"{who}_cpu_pct"]
            if who == "upstream" and not y.notna().any():
                continue  # the upstream was not measured in this run
            cpu.plot(sub["concurrency"], y, style, color=c, alpha=alpha, label=f"{model} {who}")
        rss.plot(sub["concurrency"], sub["server_rss_mb"], "-o", color=c, label=model)
    cpu.axhline(90, color="grey", linestyle=":", linewidth=1)
    _axes(cpu, "concurrency (users)", "CPU % (100 = one core)", _levels(table))
    _axes(rss, "concurrency (users)", "server RSS, peak (MB)", _levels(table))
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
        ax.set_title(level_label(level), fontsize=9)
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


def _axes(
    ax: Axes, xlabel: str, ylabel: str, levels: list[int] | None = None, logy: bool = False
) -> None:
    """Log x axis ticked at exactly the measured `levels` (none: a linear x axis)."""
    plain = FuncFormatter(lambda v, _pos: f"{v:g}")
    if levels:
        ax.set_xscale("log")
        ax.set_xticks(levels)
        ax.xaxis.set_major_formatter(plain)
        ax.xaxis.set_minor_formatter(FuncFormatter(lambda _v, _pos: ""))
    drawn = _positive_y(ax)
    if logy and drawn:  # nothing above zero (no successful response): a log axis has no range
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(plain)
        ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _pos: _minor(v, ax.get_ylim())))
    if not drawn:
        ax.text(
            0.5, 0.5, "nothing to plot: no successful response", ha="center", transform=ax.transAxes
        )
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, which="both", alpha=0.3)
    if ax.get_legend_handles_labels()[0]:  # an empty legend is a matplotlib warning
        ax.legend(fontsize=8)
    if isinstance(ax.figure, Figure):
        ax.figure.tight_layout()


def _positive_y(ax: Axes) -> bool:
    """Whether any line has a finite value above zero (all-NaN or all-zero lines have none)."""
    for line in ax.get_lines():
        y = pd.to_numeric(pd.Series(line.get_ydata()), errors="coerce")
        if ((y > 0) & y.map(math.isfinite)).any():
            return True
    return False


def _levels(table: pd.DataFrame) -> list[int]:
    return sorted(int(c) for c in table["concurrency"].unique())


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


def draw_all(run: Run, table: pd.DataFrame, out: Path, level: int | None = None) -> list[Plot]:
    """Every figure of the report, saved under `out`; `level` picks the spectrum's concurrency."""
    if table.empty:
        return []
    out.mkdir(exist_ok=True)
    colours = _colours(table)
    chosen = level if level is not None else _default_level(table)
    figures = [
        ("throughput", "Throughput vs concurrency", _THROUGHPUT, _throughput(table, colours)),
        ("latency", "p50 and p99 vs concurrency", _LATENCY, _latency(table, colours)),
        (
            "spectrum",
            f"Latency percentile spectrum at {level_label(chosen)}",
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
    return [_save(fig, out, name, title, caption) for name, title, caption, fig in figures]
