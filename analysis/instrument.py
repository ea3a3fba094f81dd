"""The instrument, measured like the server: how late the generators' event loops woke.

A generator whose loop stalls adds its stall to every request answered or due meanwhile, so a
run's reader needs the generator's own tail beside the server's: the range of its loop lag over
the run's steps, its periodic work, and which steps' p99 the lab refuses to compare because the
lag may have moved it (`generator_lag`).
"""

from __future__ import annotations

from collections.abc import Sequence

from lab.record.step import StepRecord


def instrument_lines(records: Sequence[StepRecord]) -> list[str]:
    """One line on the generators' loop lag over the run, and one on lag-flagged steps."""
    known = [r for r in records if r.evidence.generator_lag_ms]
    if not known:
        return []
    p99s = [r.evidence.generator_lag_ms.get("p99", 0.0) for r in known]
    worst_max = max(r.evidence.generator_lag_ms.get("max", 0.0) for r in known)
    periodic = max(r.evidence.generator_periodic_pct for r in known)
    lines = [
        f"the instrument: the generator's event loop woke {min(p99s):.1f}-{max(p99s):.1f} ms late "
        f"at p99 over {len(known)} step(s) (longest stall {worst_max:.0f} ms), its own periodic "
        f"work took at most {periodic:.2f}% of its time"
    ]
    lagged = [r for r in known if "generator_lag" in r.evidence.flags]
    if lagged:
        w = max(lagged, key=lambda r: r.evidence.generator_lag_ms.get("p99", 0.0))
        lines.append(
            f"generator_lag on {len(lagged)} step(s): the generator's own stalls may have moved "
            f"their p99 (worst: {w.model} {w.key.label}, loop lag p99 "
            f"{w.evidence.generator_lag_ms.get('p99', 0.0):.1f} ms against a p99 of "
            f"{w.latency.latency_ms.get('p99', 0.0):.1f} ms{_touched(w)}); their p99 is in no "
            "verdict or crossover"
        )
    return lines


def _touched(r: StepRecord) -> str:
    """The share of the step's requests the generator delayed by its p99's budget (if known)."""
    share = r.evidence.generator_touched.get("p99")
    return "" if share is None else f", {100 * share:.1f}% of its requests delayed by 15% of it"
