"""The summary tables and the conclusion of `granian-long-io`, from the measured readings.

Kept apart from the experiment's run so each stays small: this module only reads Readings
(experiments/granian_long_io/gaps.py) and says what they show: the ranking with the published
argv and the ranking when each server is configured as its docs recommend.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from experiments.granian_long_io.cases import Case
from experiments.granian_long_io.gaps import (
    Reading,
    errors_words,
    limit,
)

Measured = Sequence[tuple[Case, Reading]]
# A ranking says "RPS counts errors" where fewer than this share of the counted requests were 200
# answers (every oha run also counts the requests it cut off at its deadline: the row says so).
MOSTLY = 0.9


def recommended_table(done: Measured) -> list[dict[str, Any]]:
    """One line per configuration as its docs recommend, per wait and connection level."""
    return [
        {
            "server": c.server.name,
            "configured": c.server.note,
            "wait ms": round(c.sleep_s * 1000),
            "connections": c.connections,
            "answers 200/s": round(r.ok_rps, 1),
            "of ideal": round(r.ok_rps / r.ideal, 3),
            "held at once": round(r.held, 1),
            "server CPU %": r.server_cpu_pct,
            "oha CPU %": r.client_cpu_pct,
            "limit": limit(r)[0],
            "errors": errors_words(r),
        }
        for c, r in done
        if c.kind == "recommended"
    ]


def ranking(done: Measured, kind: str, sleep_s: float) -> str:
    """The servers of one kind at one wait (their top connection level), best 200-rate first,
    each with what limits it."""
    rows = [(c, r) for c, r in done if c.kind == kind and c.sleep_s == sleep_s]
    top = max((c.connections for c, _ in rows), default=0)
    rows = sorted((x for x in rows if x[0].connections == top), key=lambda x: -x[1].ok_rps)
    return "; ".join(
        f"{c.server.name} {r.ok_rps:,.0f}/s ({r.ok_rps / r.ideal:.0%} of the ideal, "
        f"{limit(r)[0]}{', RPS counts errors' if r.ok_rps < MOSTLY * r.rps else ''})"
        for c, r in rows
    )


def conclude(done: Measured) -> str:
    """The rankings the readings give, with the harness's argv and as the docs recommend."""
    parts = []
    for sleep_s in (0.010, 0.100):
        wait = f"{sleep_s * 1000:g} ms"
        if published := ranking(done, "published", sleep_s):
            parts.append(f"With the harness's argv at {wait}: {published}.")
        if recommended := ranking(done, "recommended", sleep_s):
            parts.append(f"As each server's docs recommend at {wait}: {recommended}.")
    cold = [(c, r) for c, r in done if c.kind == "variant"]
    if cold:
        said = "; ".join(
            f"{r.ok_rps:,.1f}/s at {c.sleep_s * 1000:g} ms (its thread's ceiling "
            f"{r.thread_ceiling:,.0f})"
            for c, r in cold
        )
        parts.append(
            f"uWSGI as published without the primer and warm-up answered {said}: in the "
            "harness's sequence its one thread first serves the warm-up's requests that oha cut "
            "off at its deadline."
        )
    return " ".join(parts)
