"""The Flask user's answer: which models run the app as it is, and what porting it would buy.

The lab's question is about an I/O-bound Flask (WSGI) app. Only the WSGI models run that app
unchanged; the asyncio models serve its Quart twin, which a user would have to write (an async
port); an asyncio server can run the Flask app itself only through a WSGI-to-ASGI bridge, which is
a configuration of its own with its own cost. So the recommendation is split: the best model that
runs the app as it is (bridged ones included, with their cost), then, beside it, the best async
port and what it would buy. A pure function of the run's points (`analysis.points`, built once)
and the manifest's models.

Every comparison in the answer is a `Claim`: two configurations at one level (the heaviest where
both have a fair result), the difference of their throughput and p99 with its interval from the
one test of difference (`lab.verdict.difference`), and "no measurable difference" where that test
calls them tied. A claim never sets figures from two levels against each other.

The answer's level is the models' own: the heaviest level where every candidate has a result of
its own, fair or lost (errors, a dead server, serialized: the model loses there). A level where
the lab or the machine kept any candidate from a result (`lab_limited`, a failed generator, the
upstream down: the registry's `outside` flags), or a candidate was not measured, is never the
answer's level, whichever model survived it: the words name the heavier levels left out and for
whom, and the answer comes from below them. So the answer is never decided by which models the
lab's own limits happened to exclude (issue 53: two identical runs named two different models at
200 users because the apparatus had excluded different ones). The answer ranks
by throughput, and a tie on throughput never hides a p99 called apart: among models tied on
throughput, one whose p99 the test calls lower than the throughput best's is picked instead, and
the answer says the rule ("picked on p99"); a tied model whose p99 the test calls apart is said
so with the ratio ("tied on throughput; p99 25.5x worse, apart beyond noise"). The candidates a
level did not compare (excluded, e.g. `lab_limited`) are named with why.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from analysis.judge import judge
from analysis.points import Point, Points, only
from analysis.runwith import how_to_run
from lab.record.flags import outside
from lab.record.models import (
    AS_IS,
    ASYNC_PORT,
    BRIDGED,
    OWN_FRAMEWORK,
    app_framework,
    models_run_app,
)
from lab.record.step import StepRecord, level_label
from lab.verdict.difference import Difference, differ

UNCHANGED = (AS_IS, BRIDGED)  # what runs the user's app without rewriting it
WORDS = {
    AS_IS: "runs your {kind} app as it is",
    BRIDGED: "runs your {kind} app through a WSGI-to-ASGI bridge",
    ASYNC_PORT: "needs an async port (ASGI, like the lab's Quart twin)",
}
KIND_WORDS = {"wsgi": "WSGI", "asgi": "ASGI"}
METRIC_WORDS = {"rps": "throughput", "p99": "p99"}
Level = tuple[str, float]  # (mode, users or arrival rate)


@dataclass(frozen=True)
class Undecided:
    """A level where the lab or the machine, not the models, decided some candidates' results."""

    label: str  # "200 users"
    who: tuple[str, ...]  # "granian-wsgi (lab_limited)", "uvicorn (not measured)"
    of: int  # the candidates compared there

    def words(self) -> str:
        return (
            f"at {self.label} the lab's own limits or the machine decided for {len(self.who)} "
            f"of {self.of} candidates ({', '.join(self.who)})"
        )


def undecided(data: Points, models: set[str]) -> dict[Level, Undecided]:
    """The levels where a candidate among `models` (those the run measured at all) carries a
    flag that names the lab or the machine (`Flag.outside`), or has no point: never the level of
    an answer."""
    present = sorted({p.model for p in data.values() if p.model in models})
    levels = {(p.mode, p.level) for p in data.values() if p.model in present}
    out = {}
    for mode, level in sorted(levels):
        who = []
        for model in present:
            p = data.get((model, mode, round(level)))
            if p is None:
                who.append(f"{model} (not measured)")
            elif lab_s := outside(p.excluded_by):
                who.append(f"{model} ({', '.join(lab_s)})")
        if who:
            label = level_label(level, None if mode == "closed" else level)
            out[(mode, level)] = Undecided(label, tuple(who), len(present))
    return out


def heavier(left: Mapping[Level, Undecided], at: Level) -> tuple[Undecided, ...]:
    """The undecided levels above `at` in its mode, heaviest first: why the answer is not there."""
    return tuple(u for lv, u in sorted(left.items(), reverse=True) if lv[0] == at[0] and lv > at)


def left_above(above: tuple[Undecided, ...]) -> str:
    """'; not at 200 users: at 200 users the lab's own limits ... decided for ...' ("" if none)."""
    if not above:
        return ""
    labels = " or ".join(u.label for u in reversed(above))
    return f"; not at {labels}: {'; '.join(u.words() for u in above)}"


@dataclass(frozen=True)
class Pick:
    """The best model of one group at one level, with its figures."""

    label: str  # "200 users" or "300 req/s"
    level: float  # users or arrival rate
    best: Point
    tied: tuple[str, ...]
    rivals: tuple[Point, ...] = ()  # the tied models, as compared
    excluded: tuple[str, ...] = ()  # candidates not compared at this level, with why
    rule: str = ""  # "picked on p99: ..." where throughput tied and p99 decided
    above: tuple[Undecided, ...] = ()  # heavier levels the lab or the machine decided

    def tie_words(self) -> str:
        """The models tied with the best on throughput, and for each whose p99 the one test
        calls apart from the best's, by how much: a tie on throughput never hides a p99 called
        apart (the answer ranks by throughput; this says what the p99 adds)."""
        said = []
        for rival in self.rivals:
            d = differ(self.best.latency, rival.latency)
            if d.apart and d.a > 0:
                ratio = d.b / d.a
                how = f"{ratio:,.1f}x worse" if ratio > 1 else f"{1 / ratio:,.1f}x better"
                said.append(f"{rival.model}: tied on throughput; p99 {how}, apart beyond noise")
            else:
                said.append(rival.model)
        return f" (tied: {', '.join(said)})" if said else ""

    def left_out(self) -> str:
        """The candidates this level did not compare, and why ("" for none)."""
        lost = (
            f"; not compared at {self.label}: {', '.join(self.excluded)}" if self.excluded else ""
        )
        return lost + left_above(self.above)


@dataclass(frozen=True)
class Claim:
    """Two configurations side by side at one level: the reference, the other, and per metric
    the difference other - reference with its interval (the one test of difference)."""

    label: str
    level: float
    ref: Point
    other: Point
    differences: tuple[Difference, Difference]  # throughput, p99
    excluded: tuple[str, ...] = ()  # candidates of either side not compared at this level
    above: tuple[Undecided, ...] = ()  # heavier levels the lab or the machine decided

    def words(self) -> str:
        """'uvicorn, 900.0 rps, p99 110 ms against uwsgi-threads, 800.0 rps, p99 120 ms:
        throughput +12% [+5%, +19%], no measurable difference in p99 (-8% [-30%, +14%])'."""
        said = ", ".join(_said(d) for d in self.differences)
        left = f"; not compared here: {', '.join(self.excluded)}" if self.excluded else ""
        return f"{_figures(self.other)} against {_figures(self.ref)}: {said}{left}" + left_above(
            self.above
        )


def groups(classes: Mapping[str, str], app: str) -> str:
    """One line: which models run the app (`app`: its words) as it is, which through a bridge,
    which need a port."""
    parts = []
    for group in (AS_IS, BRIDGED, ASYNC_PORT):
        names = sorted(m for m, c in classes.items() if c == group)
        if names:
            parts.append(f"{WORDS[group].format(kind=app)}: {', '.join(names)}")
    return "; ".join(parts)


def bests(pts: Points, models: set[str]) -> dict[Level, Pick]:
    """The best fair model among `models` at each level where one has a fair result."""
    picked = only(pts, models)
    out = {}
    for ranking in judge(picked):
        if ranking.best_rps:
            best, *tied = ranking.best_rps
            at = (ranking.mode, ranking.level)
            one = {m: picked[(m, ranking.mode, round(ranking.level))] for m in ranking.best_rps}
            best, rule = _on_p99(one, best)
            tied = [m for m in ranking.best_rps if m != best]
            excluded = tuple(f"{m} ({', '.join(fs)})" for m, fs in sorted(ranking.excluded.items()))
            rivals = tuple(one[m] for m in tied)
            out[at] = Pick(
                ranking.label, ranking.level, one[best], tuple(tied), rivals, excluded, rule
            )
    return out


def _on_p99(tied: dict[str, Point], best: str) -> tuple[str, str]:
    """Among models tied on throughput, the one whose p99 the one test calls lower than the
    throughput best's, the lowest of them; the rule in words ("" where throughput decides)."""
    lower = [
        c
        for c in tied.values()
        if c.model != best
        and differ(c.latency, tied[best].latency).apart
        and c.p99_ms < tied[best].p99_ms
    ]
    if not lower:
        return best, ""
    pick = min(lower, key=lambda c: (c.p99_ms, c.model))
    return pick.model, f"picked on p99: tied on throughput with {best}, p99 lower beyond noise"


def best_of(pts: Points, models: set[str]) -> Pick | None:
    """The best fair model among `models` at the heaviest level where one has a fair result and
    every candidate a result of its own (`undecided`); the heavier levels left out, said."""
    found, left = bests(pts, models), undecided(pts, models)
    decided = [lv for lv in found if lv not in left]
    if not decided:
        return None
    at = max(decided)
    return replace(found[at], above=heavier(left, at))


def claim(pts: Points, ref: set[str], other: set[str]) -> Claim | None:
    """The best of `other` against the best of `ref` at the heaviest level where both groups
    have a fair result and every candidate of either a result of its own (None: no such
    level)."""
    a, b, left = bests(pts, ref), bests(pts, other), undecided(pts, ref | other)
    common = (set(a) & set(b)) - set(left)
    if not common:
        return None
    level = max(common)
    x, y = a[level].best, b[level].best
    diffs = (differ(x.throughput, y.throughput), differ(x.latency, y.latency))
    excluded = a[level].excluded + b[level].excluded
    return Claim(a[level].label, a[level].level, x, y, diffs, excluded, heavier(left, level))


def _said(d: Difference) -> str:
    what = METRIC_WORDS[d.metric]
    if not d.compared:
        return f"{what} not compared ({d.basis})"
    if not d.apart:
        return f"no measurable difference in {what} ({d.percent()})"
    return f"{what} {d.percent()}"


def _figures(c: Point) -> str:
    p99 = "" if math.isnan(c.p99_ms) else f", p99 {c.p99_ms:,.0f} ms"
    return f"{c.model}, {c.rps:,.1f} rps{p99}"


def app_words(kind: str, framework: str) -> str:
    """The app in words: its interface and, where the check named one, its framework ("WSGI
    (Django)"); a plain WSGI callable is "WSGI"."""
    words = KIND_WORDS.get(kind, kind)
    return f"{words} ({framework})" if framework else words


def answer(
    pts: Points,
    classes: Mapping[str, str],
    kind: str,
    framework: str = OWN_FRAMEWORK,
) -> list[str]:
    """The answer for the user's app, in lines: who runs it how, the best that runs it
    unchanged, what an async port would buy, and what each bridged configuration costs."""
    if not pts or not classes:
        return []
    kind_words = app_words(kind, framework)
    lines = [f"your app is {kind_words}: {groups(classes, kind_words)}"]
    unchanged = {m for m, c in classes.items() if c in UNCHANGED}
    ported = {m for m, c in classes.items() if c == ASYNC_PORT}
    best = best_of(pts, unchanged)
    if best is None:
        lines.append(f"no model that runs your {kind_words} app as it is has a fair result")
        lines[-1] += _too_busy(pts, unchanged)
    else:
        rule = f"; {best.rule}" if best.rule else ""
        said = f"{_figures(best.best)}{best.tie_words()}{rule}{best.left_out()}"
        lines.append(f"for your app as it is, at {best.label}: {said}")
    lines.append(_port(pts, unchanged, ported))
    as_is = {m for m, c in classes.items() if c == AS_IS}
    lines += [_bridge(pts, as_is, m) for m, c in sorted(classes.items()) if c == BRIDGED]
    return [line for line in lines if line]


def _port(pts: Points, unchanged: set[str], ported: set[str]) -> str:
    """What an async port buys, at the heaviest level where both sides are fair."""
    if (found := claim(pts, unchanged, ported)) is not None:
        return f"if you port it to async, at {found.label}: {found.words()}"
    if (port := best_of(pts, ported)) is None:
        why = _too_busy(pts, ported)
        return f"if you port it to async: no async model has a fair result{why}" if why else ""
    alone = "no model that runs your app as it is has a fair result at a level beside it"
    return (
        f"if you port it to async, at {port.label}: {_figures(port.best)} ({alone})"
        + left_above(port.above)
    )


def _too_busy(pts: Points, models: set[str]) -> str:
    """Where no level was the models' own to decide: every level the lab or the machine decided
    for some candidate, said ("" where some level was decided, or none measured)."""
    left = undecided(pts, models)
    if not left:
        return ""
    busiest = sorted(left.items(), reverse=True)
    return " at a level where every candidate had a result of its own; " + "; ".join(
        u.words() for _, u in busiest
    )


def _bridge(pts: Points, as_is: set[str], model: str) -> str:
    """A bridged configuration against the best that runs the app as it is, or its own figures
    and why it is compared with nothing."""
    if (found := claim(pts, as_is, {model})) is not None:
        return f"through the bridge, at {found.label}: {found.words()}"
    own = only(pts, {model}).values()
    if not own:
        return ""
    c = max(own, key=lambda p: (p.mode, p.level))
    why = (
        f"{', '.join(c.excluded_by)}: excluded from the verdict"
        if c.excluded_by
        else "no model that runs your app as it is has a fair result beside it"
    )
    return f"through the bridge, at {c.label}: {_figures(c)} ({why})"


def run_answer(
    records: Sequence[StepRecord], manifest: Mapping[str, Any], pts: Points
) -> list[str]:
    """`answer()` for a run: its models' classes and the app's kind from its manifest, its
    points (`Run.points`), and its records for the configuration to run."""
    app = manifest.get("scenario", {}).get("app") or {}
    classes = models_run_app(dict(manifest))
    lines = answer(pts, classes, app.get("kind", "wsgi"), app_framework(dict(manifest)))
    unchanged = best_of(pts, {m for m, c in classes.items() if c in UNCHANGED})
    if app and unchanged is not None:  # a user's app: how to run it (lab.verdict.sizing)
        lines.append(how_to_run(records, manifest, unchanged.best.model, unchanged.level))
    return [line for line in lines if line]
