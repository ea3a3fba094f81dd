"""The Flask user's answer: which models run the app as it is, and what porting it would buy.

The lab's question is about an I/O-bound Flask (WSGI) app. Only the WSGI models run that app
unchanged; the asyncio models serve its Quart twin, which a user would have to write (an async
port); an asyncio server can run the Flask app itself only through a WSGI-to-ASGI bridge, which is
a configuration of its own with its own cost. So the recommendation is split: the best model that
runs the app as it is (bridged ones included, with their cost), then, beside it, the best async
port and what it would buy. A pure function of the step records and the manifest's models.

Every comparison in the answer is a `Claim`: two configurations at one level (the heaviest where
both have a fair result), the difference of their throughput and p99 with its interval from the
one test of difference (`lab.verdict.difference`), and "no measurable difference" where that test
calls them tied. A claim never sets figures from two levels against each other.
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
from lab.verdict.difference import Difference, differ

UNCHANGED = (AS_IS, BRIDGED)  # what runs the user's app without rewriting it
WORDS = {
    AS_IS: "runs your {kind} app as it is",
    BRIDGED: "runs your {kind} app through a WSGI-to-ASGI bridge",
    ASYNC_PORT: "needs an async port (ASGI, like the lab's Quart twin)",
}
KIND_WORDS = {"wsgi": "WSGI (Flask)", "asgi": "ASGI"}
METRIC_WORDS = {"rps": "throughput", "p99": "p99"}
Level = tuple[str, float]  # (mode, users or arrival rate)


@dataclass(frozen=True)
class Pick:
    """The best model of one group at one level, with its figures."""

    label: str  # "200 users" or "300 req/s"
    level: float  # users or arrival rate
    best: Contender
    tied: tuple[str, ...]


@dataclass(frozen=True)
class Claim:
    """Two configurations side by side at one level: the reference, the other, and per metric
    the difference other - reference with its interval (the one test of difference)."""

    label: str
    level: float
    ref: Contender
    other: Contender
    differences: tuple[Difference, Difference]  # throughput, p99

    def words(self) -> str:
        """'uvicorn, 900.0 rps, p99 110 ms against uwsgi-threads, 800.0 rps, p99 120 ms:
        throughput +12% [+5%, +19%], no measurable difference in p99 (-8% [-30%, +14%])'."""
        said = ", ".join(_said(d) for d in self.differences)
        return f"{_figures(self.other)} against {_figures(self.ref)}: {said}"


def groups(classes: Mapping[str, str], kind: str) -> str:
    """One line: which models run the app as it is, which through a bridge, which need a port."""
    parts = []
    for group in (AS_IS, BRIDGED, ASYNC_PORT):
        names = sorted(m for m, c in classes.items() if c == group)
        if names:
            words = WORDS[group].format(kind=KIND_WORDS.get(kind, kind))
            parts.append(f"{words}: {', '.join(names)}")
    return "; ".join(parts)


def bests(records: Sequence[StepRecord], models: set[str]) -> dict[Level, Pick]:
    """The best fair model among `models` at each level where one has a fair result."""
    picked = [r for r in records if r.model in models]
    out = {}
    for verdict in judge(picked):
        if verdict.best_rps:
            best, *tied = verdict.best_rps
            rows = [
                r for r in picked if r.model == best and _at(r) == (verdict.mode, verdict.level)
            ]
            out[(verdict.mode, verdict.level)] = Pick(
                verdict.label, verdict.level, contender(best, rows), tuple(tied)
            )
    return out


def _at(r: StepRecord) -> Level:
    return r.mode, r.key.level


def best_of(records: Sequence[StepRecord], models: set[str]) -> Pick | None:
    """The best fair model among `models` at the heaviest level where one has a fair result."""
    found = bests(records, models)
    return found[max(found)] if found else None


def claim(records: Sequence[StepRecord], ref: set[str], other: set[str]) -> Claim | None:
    """The best of `other` against the best of `ref` at the heaviest level where both groups
    have a fair result (None: no such level)."""
    a, b = bests(records, ref), bests(records, other)
    common = set(a) & set(b)
    if not common:
        return None
    level = max(common)
    x, y = a[level].best, b[level].best
    diffs = (differ(x.throughput, y.throughput), differ(x.latency, y.latency))
    return Claim(a[level].label, a[level].level, x, y, diffs)


def _said(d: Difference) -> str:
    what = METRIC_WORDS[d.metric]
    if not d.compared:
        return f"{what} not compared ({d.basis})"
    if not d.apart:
        return f"no measurable difference in {what} ({d.percent()})"
    return f"{what} {d.percent()}"


def _figures(c: Contender) -> str:
    p99 = "" if math.isnan(c.p99_ms) else f", p99 {c.p99_ms:,.0f} ms"
    return f"{c.model}, {c.rps:,.1f} rps{p99}"


def answer(records: Sequence[StepRecord], classes: Mapping[str, str], kind: str) -> list[str]:
    """The answer for the user's app, in lines: who runs it how, the best that runs it
    unchanged, what an async port would buy, and what each bridged configuration costs."""
    if not records or not classes:
        return []
    kind_words = KIND_WORDS.get(kind, kind)
    lines = [f"your app is {kind_words}: {groups(classes, kind)}"]
    unchanged = {m for m, c in classes.items() if c in UNCHANGED}
    ported = {m for m, c in classes.items() if c == ASYNC_PORT}
    best = best_of(records, unchanged)
    if best is None:
        lines.append(f"no model that runs your {kind_words} app as it is has a fair result")
    else:
        said = f"{_figures(best.best)}{_tie(records, best)}"
        lines.append(f"for your app as it is, at {best.label}: {said}")
    lines.append(_port(records, unchanged, ported))
    as_is = {m for m, c in classes.items() if c == AS_IS}
    lines += [_bridge(records, as_is, m) for m, c in sorted(classes.items()) if c == BRIDGED]
    return [line for line in lines if line]


def _tie(records: Sequence[StepRecord], best: Pick) -> str:
    """The models tied with the best on throughput, each told apart by p99 where the one test
    calls their p99s apart, and the rule that picked: a tie on throughput never hides a p99
    called apart ("tied on throughput: b (p99 1,503 ms, 25x worse)"), and a tied model whose
    p99 is apart and better is the pick on p99."""
    if not best.tied:
        return ""
    me = best.best
    at = {_at(r) for r in records if r.model == me.model and r.key.level == best.level}
    said, better = [], []
    for model in best.tied:
        rival = contender(model, [r for r in records if r.model == model and _at(r) in at])
        d = differ(me.latency, rival.latency)
        if not d.apart:
            said.append(model)
            continue
        worse = d.diff > 0
        times = rival.p99_ms / me.p99_ms if worse else me.p99_ms / max(rival.p99_ms, 1e-9)
        size = f"{times:.0f}x" if times >= 2 else d.percent()
        how = "worse" if worse else "better"
        said.append(f"{model} (p99 {rival.p99_ms:,.0f} ms, {size} {how})")
        if not worse:
            better.append((rival.p99_ms, model))
    if said == list(best.tied):  # no p99 apart: nothing the tie could hide
        return f" (tied: {', '.join(best.tied)})"
    rule = "rule: best throughput, its ties told apart by a p99 the test calls apart"
    if better:
        rule = f"rule: a throughput tie is decided on p99 where it is apart: {min(better)[1]}"
    return f"; tied on throughput: {', '.join(said)} ({rule})"


def _port(records: Sequence[StepRecord], unchanged: set[str], ported: set[str]) -> str:
    """What an async port buys, at the heaviest level where both sides are fair."""
    if (found := claim(records, unchanged, ported)) is not None:
        return f"if you port it to async, at {found.label}: {found.words()}"
    if (port := best_of(records, ported)) is None:
        return ""
    alone = "no model that runs your app as it is has a fair result at a level beside it"
    return f"if you port it to async, at {port.label}: {_figures(port.best)} ({alone})"


def _bridge(records: Sequence[StepRecord], as_is: set[str], model: str) -> str:
    """A bridged configuration against the best that runs the app as it is, or its own figures
    and why it is compared with nothing."""
    if (found := claim(records, as_is, {model})) is not None:
        return f"through the bridge, at {found.label}: {found.words()}"
    rows = [r for r in records if r.model == model]
    if not rows:
        return ""
    level = max(_at(r) for r in rows)
    at = [r for r in rows if _at(r) == level]
    c = contender(model, at)
    why = (
        f"{', '.join(c.excluded_by)}: excluded from the verdict"
        if c.excluded_by
        else "no model that runs your app as it is has a fair result beside it"
    )
    return f"through the bridge, at {at[0].key.label}: {_figures(c)} ({why})"


def run_answer(records: Sequence[StepRecord], manifest: Mapping[str, Any]) -> list[str]:
    """`answer()` for a run: its models' classes and the app's kind from its manifest."""
    app = manifest.get("scenario", {}).get("app") or {}
    classes = models_run_app(dict(manifest))
    lines = answer(records, classes, app.get("kind", "wsgi"))
    unchanged = best_of(records, {m for m, c in classes.items() if c in UNCHANGED})
    if app and unchanged is not None:  # a user's app: how to run it (lab.advise.sizing)
        lines.append(how_to_run(records, manifest, unchanged.best.model, unchanged.level))
    return [line for line in lines if line]
