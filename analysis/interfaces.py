"""The Flask user's answer: which models run the app as it is, and what porting it would buy.

The lab's question is about an I/O-bound Flask (WSGI) app. Only the WSGI models run that app
unchanged; the asyncio models serve its Quart twin, which a user would have to write (an async
port); an asyncio server can run the Flask app itself only through a WSGI-to-ASGI bridge, which is
a configuration of its own with its own cost. So the recommendation is split: the best model that
runs the app as it is (bridged ones included, with their cost), then, beside it, the best async
port and what it would buy. A pure function of the step records and the manifest's models.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from analysis.judge import Contender, contender, judge
from analysis.runwith import how_to_run
from lab.record.step import StepRecord
from lab.run.manifest import AS_IS, ASYNC_PORT, BRIDGED, models_run_app

UNCHANGED = (AS_IS, BRIDGED)  # what runs the user's app without rewriting it
WORDS = {
    AS_IS: "runs your {kind} app as it is",
    BRIDGED: "runs your {kind} app through a WSGI-to-ASGI bridge",
    ASYNC_PORT: "needs an async port (ASGI, like the lab's Quart twin)",
}
KIND_WORDS = {"wsgi": "WSGI (Flask)", "asgi": "ASGI"}


@dataclass(frozen=True)
class Pick:
    """The best model of one group at one level, with its figures."""

    label: str  # "200 users" or "300 req/s"
    level: float  # users or arrival rate
    best: Contender
    tied: tuple[str, ...]


def groups(classes: Mapping[str, str], kind: str) -> str:
    """One line: which models run the app as it is, which through a bridge, which need a port."""
    parts = []
    for group in (AS_IS, BRIDGED, ASYNC_PORT):
        names = sorted(m for m, c in classes.items() if c == group)
        if names:
            words = WORDS[group].format(kind=KIND_WORDS.get(kind, kind))
            parts.append(f"{words}: {', '.join(names)}")
    return "; ".join(parts)


def best_of(records: Sequence[StepRecord], models: set[str]) -> Pick | None:
    """The best fair model among `models` at the heaviest level where one has a fair result."""
    picked = [r for r in records if r.model in models]
    for verdict in reversed(judge(picked)):
        if verdict.best_rps:
            best, *tied = verdict.best_rps
            rows = [r for r in picked if r.model == best and r.key.level == verdict.level]
            return Pick(verdict.label, verdict.level, contender(best, rows), tuple(tied))
    return None


def _figures(c: Contender) -> str:
    p99 = "" if math.isnan(c.p99_ms) else f", p99 {c.p99_ms:,.0f} ms"
    return f"{c.model}, {c.rps:,.1f} rps{p99}"


def _against(c: Contender, ref: Contender) -> str:
    """`c` against the reference: throughput and p99 as a signed percentage."""
    parts = [f"{(c.rps / ref.rps - 1):+.0%} throughput" if ref.rps > 0 else ""]
    if not (math.isnan(c.p99_ms) or math.isnan(ref.p99_ms)) and ref.p99_ms > 0:
        parts.append(f"{(c.p99_ms / ref.p99_ms - 1):+.0%} p99")
    return f"{', '.join(p for p in parts if p)} against {ref.model}"


def answer(records: Sequence[StepRecord], classes: Mapping[str, str], kind: str) -> list[str]:
    """The answer for the user's app, in lines: who runs it how, the best that runs it
    unchanged, what an async port would buy, and what each bridged configuration costs."""
    if not records or not classes:
        return []
    kind_words = KIND_WORDS.get(kind, kind)
    lines = [f"your app is {kind_words}: {groups(classes, kind)}"]
    unchanged = best_of(records, {m for m, c in classes.items() if c in UNCHANGED})
    port = best_of(records, {m for m, c in classes.items() if c == ASYNC_PORT})
    if unchanged is None:
        lines.append(f"no model that runs your {kind_words} app as it is has a fair result")
    else:
        tied = f" (tied: {', '.join(unchanged.tied)})" if unchanged.tied else ""
        lines.append(
            f"for your app as it is, at {unchanged.label}: {_figures(unchanged.best)}{tied}"
        )
    if port is not None:
        cost = f": {_against(port.best, unchanged.best)}" if unchanged else ""
        lines.append(f"if you port it to async, at {port.label}: {_figures(port.best)}{cost}")
    lines += [_bridge_cost(records, m, unchanged) for m, c in classes.items() if c == BRIDGED]
    return [line for line in lines if line]


def _bridge_cost(records: Sequence[StepRecord], model: str, ref: Pick | None) -> str:
    """A bridged configuration's own figures at the reference level, excluded or not."""
    rows = [r for r in records if r.model == model]
    if not rows:
        return ""
    levels = {r.key.level for r in rows}
    level = ref.level if ref is not None and ref.level in levels else max(levels)
    at = [r for r in rows if r.key.level == level]
    c = contender(model, at)
    excluded = f" ({', '.join(c.excluded_by)}: excluded from the verdict)" if c.excluded_by else ""
    cost = f": {_against(c, ref.best)}" if ref else ""
    return f"through the bridge, {at[0].key.label}: {_figures(c)}{cost}{excluded}"


def run_answer(records: Sequence[StepRecord], manifest: Mapping[str, Any]) -> list[str]:
    """`answer()` for a run: its models' classes and the app's kind from its manifest."""
    app = manifest.get("scenario", {}).get("app") or {}
    classes = models_run_app(dict(manifest))
    lines = answer(records, classes, app.get("kind", "wsgi"))
    unchanged = best_of(records, {m for m, c in classes.items() if c in UNCHANGED})
    if app and unchanged is not None:  # a user's app: how to run it (lab.advise.sizing)
        lines.append(how_to_run(records, manifest, unchanged.best.model, unchanged.level))
    return [line for line in lines if line]
