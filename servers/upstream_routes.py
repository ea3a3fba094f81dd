"""The mock upstream at any path: per-route rules, and calls counted per route in shared memory.

Why: an app's payment or user service is pointed at `{upstream_url}` and called at its own
paths (`POST /v1/charges`), never at `/delay`. Production makes such a call wait, so the upstream
answers every path and method with the scenario's delay, or with a rule's own delay, status and
body (`--routes`, a JSON list the lab parsed from `--upstream-route`). It counts calls and the
time they waited per route, so "the upstream is slow" and "the app calls it three times" can be
told apart. The counts sit in one mmap: each process writes only its own slot of entries (a route
is one entry, found by its key), and readers sum the slots by key.
"""

from __future__ import annotations

import json
import mmap
import struct
from dataclasses import dataclass

CONTROL = {b"/stats": b"GET", b"/stats/reset": b"POST", b"/config": b"POST", b"/health": b"GET"}
ENTRY = struct.Struct("<qq80s")  # calls, microseconds waited in total, the route's key
ENTRIES = 32  # routes counted per process; the last one counts every route beyond
OTHER = b"(other routes)"


@dataclass(frozen=True)
class Rule:
    """One route's answer: `method` ("" = any), `path` (a prefix where `prefix`), the delay
    (None: the scenario's), the status and the body (b"": the default JSON)."""

    method: bytes
    path: bytes
    prefix: bool = False
    ms: float | None = None
    status: int = 200
    body: bytes = b""

    def matches(self, method: bytes, path: bytes) -> bool:
        if self.method and self.method != method:
            return False
        return path.startswith(self.path) if self.prefix else path == self.path


def load(text: str) -> tuple[Rule, ...]:
    """`--routes`: the JSON list the lab wrote (lab.config.upstreamroute)."""
    return tuple(
        Rule(
            str(r.get("method", "")).encode(),
            str(r["path"]).encode(),
            bool(r.get("prefix", False)),
            None if r.get("ms") is None else float(r["ms"]),
            int(r.get("status", 200)),
            str(r.get("body", "")).encode(),
        )
        for r in json.loads(text or "[]")
    )


def match(rules: tuple[Rule, ...], method: bytes, path: bytes) -> Rule | None:
    """The first rule for this request, None where none is."""
    for rule in rules:
        if rule.matches(method, path):
            return rule
    return None


class RouteCounts:
    """Calls and time waited per route (`METHOD /path`), summed over the upstream's processes."""

    def __init__(self, processes: int) -> None:
        self.processes = processes
        self.mem = mmap.mmap(-1, ENTRY.size * ENTRIES * processes)
        self.index: dict[bytes, int] = {}  # this process's own entries, by key

    def count(self, slot: int, key: bytes, waited_ms: float) -> None:
        """One call to `key`, which waited `waited_ms`, in this process's slot."""
        entry = self.index.get(key)
        if entry is None:
            entry = len(self.index) if len(self.index) < ENTRIES - 1 else ENTRIES - 1
            key = key if entry < ENTRIES - 1 else OTHER
            if entry < ENTRIES - 1 or OTHER not in self.index:
                self.index[key] = entry
        offset = (slot * ENTRIES + entry) * ENTRY.size
        calls, us, _ = ENTRY.unpack_from(self.mem, offset)
        ENTRY.pack_into(self.mem, offset, calls + 1, us + round(waited_ms * 1000), key[:80])

    def stats(self) -> dict[str, dict[str, float]]:
        """Each route's calls and mean wait since the last reset."""
        summed: dict[str, list[int]] = {}
        for i in range(self.processes * ENTRIES):
            calls, us, raw = ENTRY.unpack_from(self.mem, i * ENTRY.size)
            if calls:
                key = raw.rstrip(b"\0").decode(errors="replace")
                total = summed.setdefault(key, [0, 0])
                total[0], total[1] = total[0] + calls, total[1] + us
        return {
            key: {"calls": calls, "mean_ms": round(us / calls / 1000, 3)}
            for key, (calls, us) in sorted(summed.items())
        }

    def reset(self) -> None:
        """Zero every count; keys stay where they are, so each process still finds its own."""
        for i in range(self.processes * ENTRIES):
            _, _, raw = ENTRY.unpack_from(self.mem, i * ENTRY.size)
            ENTRY.pack_into(self.mem, i * ENTRY.size, 0, 0, raw)
