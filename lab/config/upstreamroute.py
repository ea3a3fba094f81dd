"""Per-route rules for the mock upstream: `--upstream-route 'POST /v1/charges=250ms 402 {...}'`.

Why: an app calls its payment or user service at paths of its own, and a production service
answers each at its own pace, sometimes with a status the app must handle. The upstream answers
every path with the scenario's delay; a rule gives one route its own delay, status and body. The
lab parses the rules here, so a bad one is a one-line error before anything starts, and hands the
upstream (servers/upstream_routes.py) the parsed rules as JSON.

A rule is `[METHOD ]/PATH=DELAY[ STATUS[ BODY]]`: no METHOD is any method, a PATH ending in `*`
is a prefix (`/v1/users/*`), DELAY is `250ms`, `0.25s` or `250` (milliseconds), STATUS 100-599
(default 200), BODY the rest of the line (default `{"ok":true}`).
"""

from __future__ import annotations

import json
import re
from typing import Any

from lab.record.errors import LabError

RULE = re.compile(
    r"^(?:(?P<method>[A-Z]+)\s+)?(?P<path>/[^\s=?#]*)=(?P<delay>[0-9.]+)(?P<unit>ms|s)?"
    r"(?:\s+(?P<status>\d{3})(?:\s+(?P<body>.+))?)?$",
    re.DOTALL,
)
MAX_DELAY_MS = 3_600_000.0
EXAMPLE = "e.g. 'POST /v1/charges=250ms', '/v1/users/*=30ms', 'GET /v1/me=10ms 401 {\"e\":1}'"


def parse(text: str, where: str = "--upstream-route") -> dict[str, Any]:
    """One rule as the upstream reads it; LabError naming what is wrong."""
    match = RULE.match(text.strip())
    if match is None:
        shape = "[METHOD ]/PATH=DELAY[ STATUS[ BODY]]"
        raise LabError(f"{where} {text!r}: expected {shape}, {EXAMPLE}")
    try:
        delay = float(match["delay"]) * (1000.0 if match["unit"] == "s" else 1.0)
    except ValueError:
        raise LabError(f"{where} {text!r}: the delay is not a number, {EXAMPLE}") from None
    if not 0 <= delay <= MAX_DELAY_MS:
        raise LabError(f"{where} {text!r}: the delay must be 0 to {MAX_DELAY_MS:g} ms")
    status = int(match["status"] or 200)
    if not 100 <= status <= 599:
        raise LabError(f"{where} {text!r}: the status must be 100-599")
    path = match["path"]
    rule: dict[str, Any] = {
        "method": match["method"] or "",
        "path": path.removesuffix("*"),
        "prefix": path.endswith("*"),
        "ms": delay,
        "status": status,
    }
    if match["body"]:
        rule["body"] = match["body"].strip()
    return rule


def check(texts: tuple[str, ...], where: str) -> tuple[str, ...]:
    """The rules as given, each one parsed once to refuse a bad one now."""
    for text in texts:
        if not isinstance(text, str):
            raise LabError(f"{where}: each upstream route must be a string, {EXAMPLE}")
        parse(text, where)
    return texts


def as_json(texts: tuple[str, ...]) -> str:
    """The upstream's `--routes` argument."""
    return json.dumps([parse(t) for t in texts], separators=(",", ":"))
