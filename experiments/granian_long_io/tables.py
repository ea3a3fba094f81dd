"""The summary tables and the conclusion of `granian-long-io`, from the measured readings.

Kept apart from the experiment's run so each stays small: this module only reads Readings
(experiments/granian_long_io/gaps.py) and says what they show: the ranking with the published
argv, the ranking when each server is configured as its docs recommend, and the May 2025 row.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from experiments.granian_long_io.cases import Case
from experiments.granian_long_io.gaps import (
    PUBLISHED_S,
    Reading,
    errors_words,
    limit,
    little,
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


def may2025(pub: Mapping[str, Any], measured: Reading | None, closes_us: float | None) -> str:
    """Why the May 2025 page could list 16,474 RPS at 100 ms for one thread, and what here
    shows the mechanism: a client that counts a failed exchange as a request."""
    f = pub["may2025_uwsgi"]["100ms"]
    busy = little(f["rps"], f["avg_ms"])
    ceiling = f.get("threads", 1) / 0.1
    said = (
        f"The May 2025 row: {f['rps']:,} RPS at {f['avg_ms']} ms with 128 connections "
        f"(requests_total {f['total']:,} over {PUBLISHED_S:g} s). Little's law: "
        f"{busy:,.0f} requests in flight of 128, every connection busy, each exchange over in "
        f"{f['avg_ms']} ms, while one thread waiting 100 ms per request answers at most "
        f"{ceiling:g}/s: at least {1 - ceiling / f['rps']:.2%} of what it counted were not "
        "answers. Its client then was rewrk, which times every request and keeps the time of a "
        "failed one too (the error and the reconnect), so a failure counts as a request."
    )
    if closes_us is not None:
        said += (
            f" Measured here: uWSGI's HTTP router answers without Content-Length and closes the "
            f"connection, so a keep-alive client's next request on it fails in {closes_us:,.0f} us "
            "with no answer: a client that counts such failures reports them at that speed."
        )
    if measured is not None:
        said += (
            f" oha against the same argv at 128 connections: {measured.rps:,.1f} RPS, "
            f"{measured.ok_rps:,.1f} answers 200/s ({errors_words(measured)})."
        )
    return said


def conclude(done: Measured, pub: Mapping[str, Any], closes_us: float | None = None) -> str:
    """The reproduction's conclusion, every figure from the readings and the page."""
    parts = []
    for sleep_s in (0.010, 0.100):
        wait = f"{sleep_s * 1000:g} ms"
        if published := ranking(done, "published", sleep_s):
            parts.append(f"With the harness's argv at {wait}: {published}.")
        if recommended := ranking(done, "recommended", sleep_s):
            parts.append(f"As each server's docs recommend at {wait}: {recommended}.")
    may = next((r for c, r in done if c.kind == "may2025"), None)
    parts.append(may2025(pub, may, closes_us))
    return " ".join(parts)
