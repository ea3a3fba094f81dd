"""A traffic mix: several routes of the user's app swept together, each chosen by its weight.

A route's weight follows `#`: `--path '/orders#5'`, `--path 'GET /search?q=shoes#2'`. A fragment
is never sent to a server, and a `#` inside a path or a query string is always percent-encoded
(`%23`), so `#WEIGHT` cannot clash with any route a server sees; `=` (`/search?q=5`) and `:`
(`/at/12:30`) both could. Without any weight, the last route (or `--probe-path`) is loaded alone,
as before; with weights, the weighted routes are the mix and the others are only checked (a
health route, say). `#0` checks a route without loading it.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass

from lab.record.errors import LabError

WEIGHT_MARK = "#"
# Every route's body and headers travel to each generator process inside its start message, one
# command-line argument, which Linux caps at 128 KiB: the mix stays well below.
MAX_MIX_BYTES = 100_000


@dataclass(frozen=True)
class MixRoute:
    """One route of the mix as the generator sends it: its own body and headers (placeholders,
    `lab.record.placeholders`, filled per request), the statuses that count as its success."""

    label: str  # `/path?query`, or `METHOD /path?query`: how every table names it
    method: str
    path: str
    weight: float  # relative: the users choose each request's route with these odds
    body: str | None = None  # sent with every method but GET
    headers: tuple[tuple[str, str], ...] = ()
    expect: tuple[int, ...] = ()  # (): any status below 400 is a success


def split_weight(text: str, where: str = "--path") -> tuple[str, float | None]:
    """`/list#5` -> ("/list", 5.0); no `#` -> (text, None). LabError naming the bad one."""
    route, mark, weight = text.strip().partition(WEIGHT_MARK)
    if not mark:
        return route, None
    try:
        value = float(weight)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 0):
        raise LabError(
            f"{where} {text!r}: the weight after {WEIGHT_MARK} must be a number >= 0, "
            f"e.g. /orders{WEIGHT_MARK}5"
        )
    return route.strip(), value


def check_size(mix: tuple[MixRoute, ...]) -> None:
    """LabError naming the biggest route where the mix's routes, bodies and headers together are
    more than a generator's start message can carry."""
    sizes = {m.label: len(json.dumps(asdict(m))) for m in mix}
    if sum(sizes.values()) > MAX_MIX_BYTES:
        biggest = max(sizes, key=lambda label: sizes[label])
        raise LabError(
            f"the mix's routes, bodies and headers add up to {sum(sizes.values())} bytes, more "
            f"than the {MAX_MIX_BYTES} a generator is sent; the biggest is {biggest} "
            f"({sizes[biggest]} bytes): send a smaller body"
        )


def shares(mix: tuple[MixRoute, ...]) -> dict[str, float]:
    """Each route's share of the requests (0-1), from the weights."""
    total = sum(r.weight for r in mix)
    return {r.label: r.weight / total if total else 0.0 for r in mix}


def weighted_ms(mix: tuple[MixRoute, ...], solo_ms: dict[str, float]) -> float:
    """The mix's service time alone: each route's solo time weighted by its share (d in the
    ideal c / d); 0 when a route's time is unknown (no ideal then)."""
    if not mix or any(solo_ms.get(r.label, 0.0) <= 0 for r in mix):
        return 0.0
    share = shares(mix)
    return round(sum(share[r.label] * solo_ms[r.label] for r in mix), 1)


def describe(mix: tuple[MixRoute, ...]) -> str:
    """The mix in words: `/list 62%, /item/1 38%`."""
    share = shares(mix)
    return ", ".join(f"{r.label} {100 * share[r.label]:.0f}%" for r in mix)
