"""Run parameters a locust user reads before each request: delay, its distribution, route, split.

They are locust custom arguments (shown in the web UI's start form), so they can be changed from
the UI without restarting anything: `request_for` reads them from the parsed options every time.
The delay is drawn per request on the client side and passed to the server explicitly, so every
model sees the same delay law whatever the upstream was started with.
"""

from __future__ import annotations

import argparse
import functools
import random
from dataclasses import dataclass
from typing import Any

from loadgen.request import Request
from servers.common import DEFAULT_CPU_N, expected_body
from servers.upstream import DISTRIBUTIONS, Delay

ROUTES = ("io", "sleep", "cpu")


@dataclass(frozen=True)
class RunParams:
    delay_ms: float = 100.0
    distribution: str = "fixed"
    route: str = "io"
    split: str = ""  # "model=weight,..."; empty: every model gets the same number of users

    @classmethod
    def of(cls, options: Any) -> RunParams:
        """From locust's parsed options (the UI sends strings; bad values fall back, logged)."""
        return cls(
            delay_ms=max(0.0, float(getattr(options, "lab_delay_ms", cls.delay_ms))),
            distribution=str(getattr(options, "lab_distribution", cls.distribution)),
            route=str(getattr(options, "lab_route", cls.route)),
            split=str(getattr(options, "lab_split", cls.split) or ""),
        )

    @property
    def mean_delay_s(self) -> float:
        """d in the ideal throughput users / d; 0 for the CPU route, which has no ideal."""
        return 0.0 if self.route == "cpu" else self.delay_ms / 1000


def add_arguments(parser: Any) -> None:
    """Register the parameters with locust's parser (`events.init_command_line_parser`)."""
    group = parser.add_argument_group("concurrency-lab run parameters")
    group.add_argument(
        "--lab-delay-ms",
        type=float,
        default=100.0,
        help="Mean upstream delay per request, ms (ideal rps = users / delay)",
    )
    group.add_argument(
        "--lab-distribution",
        choices=DISTRIBUTIONS,
        default="fixed",
        help="How each request's delay is drawn around the mean",
    )
    group.add_argument(
        "--lab-route",
        choices=ROUTES,
        default="io",
        help="io: wait on the upstream; sleep: in-process sleep; cpu: CPU work",
    )
    group.add_argument(
        "--lab-split",
        default="",
        help="Users per model as weights, e.g. uwsgi-threads=3,gunicorn-gevent=1 "
        "(empty: the same for every model)",
    )


def request_for(params: RunParams, rng: random.Random) -> Request:
    """The next request: its delay drawn from the distribution, with the body it must get back."""
    ms = round(Delay(params.delay_ms, params.distribution).draw_ms(rng))
    match params.route:
        case "io":
            path = f"/io?delay_ms={ms}"
        case "sleep":
            path = f"/sleep?ms={ms}"
        case _:
            path = f"/cpu?n={DEFAULT_CPU_N}"
    return Request(path, _expected(path))


@functools.lru_cache(maxsize=4096)
def _expected(path: str) -> bytes:
    return expected_body(path)  # /cpu computes its result: once per distinct path


def weights(split: str, models: list[str]) -> dict[str, int]:
    """Each model's user weight from `--lab-split`; unknown names and bad numbers are errors."""
    out = dict.fromkeys(models, 1)
    for pair in filter(None, (p.strip() for p in split.split(","))):
        name, _, value = (part.strip() for part in pair.partition("="))
        if name not in out:
            raise argparse.ArgumentTypeError(f"--lab-split: unknown model {name!r}")
        try:
            out[name] = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"--lab-split {pair!r}: expected MODEL=WHOLE_NUMBER"
            ) from None
        if out[name] < 0:
            raise argparse.ArgumentTypeError(f"--lab-split {pair!r}: weight must be >= 0")
    return out
