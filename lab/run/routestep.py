"""A mix's step: each route's latency kept beside the step's, and its figures in the record.

The step's own `.hlog` holds the mix's seconds; `<step>.routes.hlog` beside it holds one
interval per route over the whole window, tagged `route<i>` (i: the route's place in the mix),
so each route's percentiles are read from its full HdrHistogram, never from the mix's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lab.config.mix import MixRoute, shares
from lab.record import hist
from loadgen.protocol import Done


def relpath(step_hlog: str) -> str:
    """Where a step's per-route histograms go, relative to the run directory."""
    return step_hlog.removesuffix(".hlog") + ".routes.hlog"


def kept(
    run_dir: Path, step_hlog: str, done: Done | None, mix: tuple[MixRoute, ...]
) -> dict[str, dict[str, Any]]:
    """Write the routes' histograms; each route's figures for the record ({}: no mix)."""
    if done is None or not done.routes or not mix:
        return {}
    share = shares(mix)
    path = relpath(step_hlog)
    out: dict[str, dict[str, Any]] = {}
    with hist.HlogWriter(run_dir / path) as writer:
        for i, route in enumerate(mix):
            figures = done.routes.get(route.label)
            if figures is None:
                continue
            h = hist.decode(figures["histogram"])
            h.set_tag(f"route{i}")
            writer.write(0.0, done.duration_s, h)
            out[route.label] = {
                "weight": route.weight,
                "share": round(share[route.label], 4),
                "requests": int(figures["requests"]),
                "ok": int(figures["ok"]),
                "errors": dict(figures["errors"]),
                "latency_ms": hist.summary_ms(h) if h.get_total_count() else {},
                "histogram": path,
                "tag": f"route{i}",
            }
    return out
