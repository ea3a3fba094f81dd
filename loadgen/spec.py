"""What a step asks of the load generator: plain data, safe to import anywhere.

The load generator processes (`loadgen.worker`, `loadgen.openloop`) monkey-patch with gevent as
they start; the lab's own process must not, so it only ever imports this module.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

ARRIVALS = ("constant", "poisson")


@dataclass(frozen=True)
class StepSpec:
    """One closed-loop step: `users` users, each sending its next request on a response."""

    base_url: str  # e.g. http://127.0.0.1:18080
    path: str  # e.g. /io
    users: int  # closed loop: simultaneous users; open loop: the cap on outstanding requests
    settle_s: float  # after starting, before measuring: excluded from every figure
    duration_s: float  # the measured window
    timeout_s: float  # per request
    expected_body: str | None = None  # a 2xx with another body counts as a "bad_body" error
    hlog: str | None = None  # where to write the histograms; None for a warm-up
    mode: str = "closed"

    def to_json(self) -> str:
        return json.dumps(asdict(self))


@dataclass(frozen=True)
class OpenSpec(StepSpec):
    """One open-loop step: requests start on a schedule; `users` is the cap on outstanding ones."""

    rate_rps: float = 0.0  # target arrival rate
    arrival: str = "constant"  # "constant" spacing or "poisson" (exponential gaps, same mean)
    seed: int | None = None  # for reproducible Poisson schedules
    mode: str = "open"


def spec_from_json(text: str) -> StepSpec:
    data = json.loads(text)
    return OpenSpec(**data) if data.get("mode") == "open" else StepSpec(**data)
