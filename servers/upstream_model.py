"""What the mock upstream does per request: a delay drawn from a distribution, and faults.

Shared by both engines (the lean httptools one and the aiohttp fallback), so they behave alike.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

DISTRIBUTIONS = ("fixed", "uniform", "exponential", "lognormal")
LOGNORMAL_SIGMA = 0.5


@dataclass(frozen=True)
class Delay:
    """How long `/delay` waits when the request does not say: a mean and a distribution."""

    mean_ms: float
    distribution: str = "fixed"

    def draw_ms(self, rng: random.Random) -> float:
        m = self.mean_ms
        match self.distribution:
            case "fixed":
                return m
            case "uniform":  # uniform on [0, 2m]: mean m
                return rng.uniform(0, 2 * m)
            case "exponential":
                return rng.expovariate(1 / m) if m > 0 else 0.0
            case "lognormal":  # mu chosen so the mean is m
                return rng.lognormvariate(_lognormal_mu(m), LOGNORMAL_SIGMA) if m > 0 else 0.0
        raise ValueError(f"unknown distribution {self.distribution!r}")


def _lognormal_mu(mean_ms: float) -> float:
    return math.log(mean_ms) - LOGNORMAL_SIGMA**2 / 2


@dataclass(frozen=True)
class Faults:
    error_rate: float = 0.0  # fraction of requests answered 500 after their delay
    stall_rate: float = 0.0  # fraction of requests that wait stall_ms more
    stall_ms: float = 0.0
