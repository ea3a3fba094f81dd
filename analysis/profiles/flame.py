"""The profiled steps read back: a flame graph per step in the report, drawn by the lab as inline
SVG (no script, no CDN), and where a change moved the time in `lab compare`.

Each profiled step (`lab run --profile`) kept its busy recorder's collapsed stacks (where the
server's CPU went, `lab.record.stacks`); the graph stacks each frame on its caller, its width its
share of the samples, its colour its owner (`lab.verdict.owners`: the app's code, the framework,
the server, a driver, the interpreter). A frame's full name and share are its tooltip (`<title>`),
so the report stays one file that opens offline. `lab compare` puts each point's owners and top
packages of run A beside run B's (`moved`).
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lab.record import stacks as kept
from lab.record.step import StepRecord, level_label
from lab.verdict import owners

WIDTH, ROW = 1100, 16  # pixels
MIN_SHARE = 0.002  # frames narrower than this share of the samples are left out
MAX_DEPTH = 48
COLOURS = {
    "app": "#f2a65a",
    "framework": "#e8d26b",
    "server": "#8fbf7a",
    "driver": "#6fa8dc",
    "interpreter": "#c5b3d9",
    "idle": "#dddddd",
}


@dataclass
class Node:
    samples: int = 0
    children: dict[str, Node] = field(default_factory=dict)


def tree(stacks: Mapping[str, int]) -> Node:
    """The stacks as a call tree; a process frame shortened to its pid and program."""
    root = Node()
    for stack, n in stacks.items():
        node = root
        node.samples += n
        for frame in stack.split(";"):
            label = _process(frame) if frame.startswith("process ") else frame
            node = node.children.setdefault(label, Node())
            node.samples += n
    return root


def _process(frame: str) -> str:
    return f"{frame.partition(':')[0]} ({owners.program(frame)})"


def svg(stacks: Mapping[str, int]) -> str:
    """The flame graph of `stacks`, root at the bottom, as one `<svg>` element."""
    root = tree(stacks)
    if not root.samples:
        return ""
    height = max(_depth(root, root.samples), 1) * ROW
    rects: list[str] = []
    _draw(root, 0.0, height - ROW, root.samples, rects)
    return (
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{WIDTH}' height='{height}' "
        f"font-family='monospace' font-size='11'>{''.join(rects)}</svg>"
    )


def _depth(node: Node, total: int, depth: int = 0) -> int:
    """The deepest row drawn: frames wide enough, up to `MAX_DEPTH`."""
    wide = [c for c in node.children.values() if c.samples / total >= MIN_SHARE]
    if not wide or depth >= MAX_DEPTH:
        return depth
    return max(_depth(c, total, depth + 1) for c in wide)


def _draw(node: Node, x: float, y: float, total: int, rects: list[str]) -> None:
    """Each child of `node` as a rectangle from `x` on the row at `y`, its children above."""
    for label, child in sorted(node.children.items()):
        w = child.samples / total * WIDTH
        if child.samples / total >= MIN_SHARE and y >= 0:
            rects.append(_rect(label, x, y, w, child.samples / total))
            _draw(child, x, y - ROW, total, rects)
        x += w


def _rect(label: str, x: float, y: float, w: float, share: float) -> str:
    owner = "server" if label.startswith("process ") else owners.owner(owners.package(label))
    colour = COLOURS[owner]
    name = html.escape(label, quote=True)
    fits = max(int(w / 7) - 1, 0)  # characters of 11 px monospace
    text = html.escape(label if len(label) <= fits else label[: max(fits - 1, 0)] + "…")
    shown = f"<text x='{x + 2:.1f}' y='{y + ROW - 4}'>{text}</text>" if fits >= 3 else ""
    return (
        f"<g><title>{name}: {share:.1%}</title><rect x='{x:.1f}' y='{y}' "
        f"width='{max(w - 0.5, 0.5):.1f}' height='{ROW - 1}' fill='{colour}'/>{shown}</g>"
    )


def legend() -> str:
    return " ".join(
        f"<span style='background:{c};padding:0 .4em'>{o}</span>" for o, c in COLOURS.items()
    )


def flames_html(records: list[StepRecord], run_dir: Path) -> str:
    """The report's section: one flame graph per step whose stacks were kept, with its words."""
    parts = []
    for r in records:
        profile: dict[str, Any] = r.evidence.details.get("profile") or {}
        files = profile.get("stacks") or {}
        busy = kept.read(run_dir / files["busy"]) if "busy" in files else {}
        drawn = svg(busy)
        if not drawn:
            continue
        said = owners.said(profile, "unknown") or "no frame above 5% of the CPU samples"
        where = f"{r.model} at {level_label(r.users, r.rate_rps)}, trial {r.trial}"
        head = f"{where}: {r.evidence.limited_by}"
        parts.append(
            f"<h3>{html.escape(head)}</h3><p>{html.escape(said)}; the server's processes on a CPU, "
            f"{profile.get('samples', {}).get('busy', 0)} samples at {profile.get('rate_hz', 0)} "
            f"Hz</p><div class=wide>{drawn}</div>"
        )
    if not parts:
        return ""
    return (
        "<h2>Where the server's CPU went (sampled stacks)</h2><p>Each frame above its caller, "
        f"its width its share of the CPU samples; colours: {legend()}.</p>" + "".join(parts)
    )


def _point(records: list[StepRecord]) -> dict[tuple[str, str], dict[str, float]]:
    """(model, level) -> the mean over its trials of each owner's share of the window and each
    top package's share of the CPU samples ("pkg" keys)."""
    seen: dict[tuple[str, str], list[dict[str, float]]] = {}
    for r in records:
        profile = r.evidence.details.get("profile") or {}
        if not profile.get("owners_pct"):
            continue
        shares = dict(profile["owners_pct"])
        shares |= {f"in {t['package']}": t["pct"] for t in profile.get("cpu_top") or ()}
        seen.setdefault((r.model, level_label(r.users, r.rate_rps)), []).append(shares)
    return {
        key: {k: sum(t.get(k, 0.0) for t in trials) / len(trials) for k in set().union(*trials)}
        for key, trials in seen.items()
    }


def moved(a: list[StepRecord], b: list[StepRecord], least: float = 5.0) -> list[list[str]]:
    """Per point profiled in both runs: each share that moved `least` points or more, A -> B
    (owners as shares of the window, `in PKG` as shares of the CPU samples)."""
    pa, pb = _point(a), _point(b)
    rows = []
    for key in sorted(set(pa) & set(pb)):
        shares = [
            f"{k} {pa[key].get(k, 0):.0f}% → {pb[key].get(k, 0):.0f}%"
            for k in sorted(set(pa[key]) | set(pb[key]))
            if abs(pb[key].get(k, 0) - pa[key].get(k, 0)) >= least
        ]
        rows.append([*key, "; ".join(shares) or f"nothing moved {least:g} points"])
    return rows
