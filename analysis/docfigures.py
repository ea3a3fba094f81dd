"""Figures in the docs that cannot go stale: each is rendered from a committed run summary.

A figure in README.md or docs/*.md sits between two comments that name its summary and how to
draw it:

    <!-- figure: docs/figures/quick.json view=quick-table -->
    ...generated text...
    <!-- /figure -->

The summary (`docs/figures/*.json`, small: a few kB) holds where the figures come from (`run_id`,
`machine`, `date`, `command`) and the figures themselves: for a sweep, one point per model and
level, made by `python -m analysis.docfigures summarize RUN_DIR OUT.json` from the run directory;
for a table or an output kept from a run whose directory is not in the repository, its rows or its
text. `python -m analysis.docfigures refresh` rewrites every block from its summary;
tests/test_docs.py fails when a block differs from its summary, when a summary does not name its
run, machine and date, and when a table or output of measured figures stands outside a block.
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from analysis.docsummary import ROOT, Summary, framework, records, summarize
from analysis.interfaces import answer
from analysis.points import build
from lab.record.step import level_label
from lab.verdict.difference import floor, smallest

BLOCK = re.compile(
    r"(<!-- figure: (?P<source>\S+)(?: view=(?P<view>[\w-]+))? -->\n)"
    r"(?P<body>(?:(?!<!-- /?figure).)*?)\n?<!-- /figure -->",  # never across another block
    re.S,
)
END = "<!-- /figure -->"
PROVENANCE = ("run_id", "machine", "date", "command")
RUN_ID = re.compile(r"^\d{8}-\d{6}-[\w.-]+$")  # as lab.record.rundir names a run


def docs(root: Path = ROOT) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def load_summary(source: str, root: Path = ROOT) -> Summary:
    return dict(json.loads((root / source).read_text()))


def provenance(s: Summary) -> str:
    """The line every figure starts with: run id, machine, date and the command that made it."""
    run = f"run `{s['run_id']}`" if RUN_ID.match(s["run_id"]) else f"run id {s['run_id']}"
    where = f"{run}, {s['machine']}, {s['date']}"
    return f"Source: {where}; `{s['command']}` (summary: `{s['source']}`)."


def table(headers: list[str], rows: list[list[Any]], align: list[str] | None = None) -> str:
    """A Markdown table; `align` is its second line's cells (default: the first column left,
    the figures right)."""
    align = align or ["---", *["---:"] * (len(headers) - 1)]
    lines = [headers, align, *[[str(c) for c in r] for r in rows]]
    return "\n".join("| " + " | ".join(line) + " |" for line in lines)


def view_table(s: Summary) -> str:
    return table(s["headers"], s["rows"], s.get("align"))


def view_text(s: Summary) -> str:
    return "```text\n" + "\n".join(s["text"]) + "\n```"


def view_run_text(s: Summary) -> str:
    """What a command printed, with how long it took and its exit code."""
    took = (
        f"{s['wall_s'] // 60} min {s['wall_s'] % 60} s" if s["wall_s"] >= 60 else f"{s['wall_s']} s"
    )
    return f"It took {took}, exit code {s['exit_code']}:\n\n{view_text(s)}"


def _points(s: Summary) -> dict[tuple[str, int], dict[str, Any]]:
    return {(p["model"], int(p["users"])): p for p in s["points"]}


def _known(value: float | None) -> bool:
    """A figure the step measured: not missing, not zero, not NaN (a step with no answers has
    no efficiency and no p99)."""
    return bool(value) and not math.isnan(float(value or 0))


def view_quick_table(s: Summary) -> str:
    """Throughput per level (efficiency against users/d from 100 users on), then p99, server and
    client CPU at the top level, flags on the model's steps, and how it runs a Flask app."""
    points, levels = _points(s), sorted({int(p["users"]) for p in s["points"]})
    top = levels[-1]
    at = level_label(top)
    headers = ["model", "your app", *[level_label(c) for c in levels]]
    headers += [f"p99 at {at}", f"server CPU at {at}", f"client CPU at {at}", "flags"]
    rows = []
    for model in s["models"]:
        cells = []
        for c in levels:
            p = points.get((model, c))
            eff = f" ({p['efficiency']:.2f})" if p and c >= 100 and _known(p["efficiency"]) else ""
            cells.append(f"{p['rps']:,.1f}{eff}" if p else "-")
        last = points.get((model, top), {})
        flags = sorted({f for c in levels for f in points.get((model, c), {}).get("flags", [])})
        rows.append(
            [
                model,
                s["runs_app"].get(model, "-"),
                *cells,
                f"{last['p99_ms']:,.0f} ms" if last and _known(last["p99_ms"]) else "-",
                f"{last['server_cpu_pct']:.0f}%" if last else "-",
                f"{last['client_cpu_pct']:.0f}%" if last else "-",
                ", ".join(flags) or "none",
            ]
        )
    return table(headers, rows, ["---", "---", *["---:"] * (len(headers) - 3), "---"])


def _of_ideal(s: Summary, p: dict[str, Any]) -> float:
    """A point's throughput as a share of the ideal the plot dashes, users / delay (the point
    table's efficiency divides by the lower of that and the CPU's ceiling, so at the top level it
    reads near 100% where the model served half the ideal)."""
    return float(p["rps"]) / (int(p["users"]) * 1000 / float(s["delay_ms"]))


def _quick_levels(s: Summary) -> tuple[list[Any], list[int], list[Any], list[Any], float]:
    """A sweep summary's points, its levels, the fair points, the fair ones at the top level, and
    the lowest share of the ideal of a fair point below it (what the caption and the answer both
    say)."""
    pts, levels = s["points"], sorted({int(p["users"]) for p in s["points"]})
    fair = [p for p in pts if p["fair"]]
    below = [_of_ideal(s, p) for p in fair if int(p["users"]) < levels[-1]]
    at_top = [p for p in fair if int(p["users"]) == levels[-1]]
    return pts, levels, fair, at_top, min(below, default=0)


def view_quick_caption(s: Summary) -> str:
    """What the README says under its plot, every number from the summary."""
    pts, levels, fair, at_top, worst_below = _quick_levels(s)
    top, below = levels[-1], levels[:-1]
    eff = [_of_ideal(s, p) for p in at_top]
    p50 = [p["p50_ms"] for p in at_top]
    flagged = {f: sum(f in p["flags"] for p in pts) for p in pts for f in p["flags"]}
    flags = "; ".join(f"`{f}` on {n} of its {len(pts)} steps" for f, n in sorted(flagged.items()))
    return (
        "Throughput (ok responses/s) against users, `lab run --scenario quick` "
        f"({len(s['models'])} models, {levels[0]} to {top} users, {s['delay_ms']:g} ms upstream "
        f"delay, {s['duration_s']:g} s per level, one trial; {s['wall_s'] / 60:.1f} min in all). "
        f"Every step the verdict counts ({len(fair)} of {len(pts)}) stays within "
        f"{1 - worst_below:.0%} of the ideal (dashed: users / delay) up to {below[-1]} users and "
        f"reaches {min(eff):.0%}-{max(eff):.0%} of it at {top} (p50 {min(p50):.0f}-{max(p50):.0f} "
        f"ms against the {s['delay_ms']:g} ms delay). Flags: {flags or 'none'}. The answer it "
        "gives is [above](#the-labs-own-reference-its-mock-app)."
    )


def view_quick_answer(s: Summary) -> str:
    """The README's short answer and why: the answer today's code gives from the committed
    run's step records (the best model that runs the app unchanged, ties named, the async port
    beside it at one level with the difference's interval) and the figures that explain it,
    every number from the summary."""
    _, levels, _, at_top, worst_below = _quick_levels(s)
    top, below = levels[-1], levels[:-1]
    cpu = [p["server_cpu_pct"] for p in at_top]
    said = answer(build(records(s)), s["runs_app"], s.get("kind", "wsgi"), framework(s))
    lines = [f"- {line[0].upper()}{line[1:]}." for line in said]
    why = (
        f"- Why: the app waits {s['delay_ms']:g} ms on its upstream per request, so a model that "
        "holds the users in flight serves about users / delay, whatever its kind: every fair step "
        f"stays within {1 - worst_below:.0%} of that up to {below[-1]} users. The models part only "
        f"at {top} users, where the server's CPU per request starts to count "
        f"({min(cpu):.0f}-{max(cpu):.0f}% of a core): there the order above is decided."
    )
    return "\n".join([*lines, why])


def view_answer(s: Summary) -> str:
    """A sweep's answer as `lab run` prints it, given again by today's code from the committed
    run's step records (never stored text: a change to the claims changes the docs)."""
    said = answer(build(records(s)), s["runs_app"], s.get("kind", "wsgi"), framework(s))
    return "```text\n" + "\n".join(said) + "\n```"


def view_kept_answer(s: Summary) -> str:
    """A user's app's answer as its run printed it: the kept output's lines from "your app is"
    to the configuration to run (the answer, the async port where there is one), before the
    run's closing lines; the tutorial's sweep shows the whole output, the README these lines."""
    lines: list[str] = s["text"]
    first = next(i for i, line in enumerate(lines) if line.startswith("your app is"))
    said = [line for line in lines[first:] if not line.startswith("not a fair")]
    end = next((i for i, line in enumerate(said) if line.startswith(CLOSING)), len(said))
    return "```text\n" + "\n".join(said[:end]) + "\n```"


CLOSING = ("crossovers", "the instrument", "the smallest change", "done:", "written:")


def view_samples(s: Summary) -> str:
    """How many requests each percentile rests on at each level: a step's requests (throughput x
    the measured seconds, lowest and highest over the models) and how many of them lie beyond
    p99 and p99.9. Under about 10 beyond a percentile, it is close to the maximum."""
    rows = []
    for c in sorted({int(p["users"]) for p in s["points"]}):
        counts = [p["rps"] * s["duration_s"] for p in s["points"] if int(p["users"]) == c]
        low, high = min(counts), max(counts)
        rows.append(
            [
                level_label(c),
                f"{low:,.0f}-{high:,.0f}",
                f"{low / 100:,.1f}-{high / 100:,.1f}",
                f"{low / 1000:,.2f}-{high / 1000:,.2f}",
            ]
        )
    headers = ["level", "requests per step", "beyond p99", "beyond p99.9"]
    return table(headers, rows)


def view_image(s: Summary) -> str:
    """The plot `lab report` drew from the run (its digest is in the summary)."""
    top = max(int(p["users"]) for p in s["points"])
    alt = (
        f"Throughput against users for {len(s['models'])} models in run {s['run_id']}, 1 to {top} "
        "users, with each model's ideal (users / delay) dashed"
    )
    return f"![{alt}]({s['image']})"


def view_smallest(s: Summary) -> str:
    """The smallest difference the one test of difference calls apart between two points of one
    and of three trials each, from the committed run-to-run floor (today's code and floor)."""
    noise = floor()
    rows = [
        [str(n), f"{smallest('rps', n, noise):.1%}", f"{smallest('p99', n, noise):.1%}"]
        for n in (1, 3)
    ]
    where = f"From the floor of A/A runs {' and '.join(noise.runs)} on {noise.machine}."
    return f"{where}\n\n" + table(["trials per point", "throughput", "p99"], rows)


VIEWS: dict[str, Callable[[Summary], str]] = {
    "table": view_table,
    "text": view_text,
    "run-text": view_run_text,
    "quick-table": view_quick_table,
    "quick-caption": view_quick_caption,
    "quick-answer": view_quick_answer,
    "answer": view_answer,
    "kept-answer": view_kept_answer,
    "image": view_image,
    "samples": view_samples,
    "smallest": view_smallest,
}


def render(source: str, view: str | None, root: Path = ROOT) -> str:
    s = {**load_summary(source, root), "source": source}
    body = VIEWS[view or s.get("view", "table")](s)
    if view == "image":
        return body
    if view == "quick-caption":
        return f"{body} {provenance(s)}"
    return f"{provenance(s)}\n\n{body}"


def refreshed(text: str, root: Path = ROOT) -> str:
    """`text` with every figure block rewritten from its summary."""
    return BLOCK.sub(
        lambda m: f"{m.group(1)}{render(m.group('source'), m.group('view'), root)}\n{END}",
        text,
    )


def main(argv: list[str]) -> None:
    if argv[:1] == ["refresh"]:
        for doc in docs():
            doc.write_text(refreshed(doc.read_text()))
        return
    if argv[:1] == ["summarize"] and len(argv) in (4, 5):
        image = Path(argv[4]) if len(argv) == 5 else None
        summary = summarize(Path(argv[1]), argv[3], image)
        Path(argv[2]).write_text(json.dumps(summary, indent=1, ensure_ascii=False) + "\n")
        return
    sys.exit(
        "usage: python -m analysis.docfigures refresh | summarize RUN_DIR OUT.json COMMAND [IMAGE]"
    )


if __name__ == "__main__":
    main(sys.argv[1:])
