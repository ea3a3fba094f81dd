"""The mock slow upstream: a third-party API that answers after a delay, over real TCP.

Runs as its own process on loopback (aiohttp on uvloop when available). Each `/delay` request waits
a fixed time or one drawn per request from a distribution, and can be made to fail or stall, so the
lab can play a brownout. `/stats` reports requests served and the in-flight high-water mark, which
proves how much concurrency actually reached the upstream.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
from dataclasses import dataclass

from aiohttp import web

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


class Upstream:
    """The handlers and their counters; one instance per process."""

    def __init__(self, delay: Delay, faults: Faults, seed: int | None = None) -> None:
        self.delay = delay
        self.faults = faults
        self.rng = random.Random(seed)
        self.served = 0
        self.inflight = 0
        self.max_inflight = 0

    async def handle_delay(self, req: web.Request) -> web.Response:
        self.inflight += 1
        self.max_inflight = max(self.max_inflight, self.inflight)
        try:
            ms = float(req.query["ms"]) if "ms" in req.query else self.delay.draw_ms(self.rng)
            if self.faults.stall_rate and self.rng.random() < self.faults.stall_rate:
                ms += self.faults.stall_ms
            await asyncio.sleep(ms / 1000)
            failed = self.faults.error_rate and self.rng.random() < self.faults.error_rate
            return web.Response(
                status=500 if failed else 200,
                body=b'{"ok":false}' if failed else b'{"ok":true}',
                content_type="application/json",
            )
        finally:
            self.inflight -= 1
            self.served += 1

    def stats(self) -> dict[str, float]:
        return {"served": self.served, "inflight": self.inflight, "max_inflight": self.max_inflight}

    async def handle_stats(self, _: web.Request) -> web.Response:
        return web.json_response(self.stats())

    async def handle_reset(self, _: web.Request) -> web.Response:
        """Start a measurement window: the high-water mark restarts from what is in flight."""
        self.max_inflight = self.inflight
        self.served = 0
        return web.json_response(self.stats())

    async def handle_config(self, req: web.Request) -> web.Response:
        """Change the default delay or faults while running (the brownout story needs this)."""
        new = json.loads(await req.read() or b"{}")
        self.delay = Delay(
            float(new.get("delay_ms", self.delay.mean_ms)),
            new.get("distribution", self.delay.distribution),
        )
        self.faults = Faults(
            float(new.get("error_rate", self.faults.error_rate)),
            float(new.get("stall_rate", self.faults.stall_rate)),
            float(new.get("stall_ms", self.faults.stall_ms)),
        )
        return web.json_response({"delay_ms": self.delay.mean_ms, **self.faults.__dict__})

    async def handle_health(self, _: web.Request) -> web.Response:
        return web.Response(text="ok")


def make_app(upstream: Upstream) -> web.Application:
    app = web.Application()
    app.add_routes(
        [
            web.get("/delay", upstream.handle_delay),
            web.get("/stats", upstream.handle_stats),
            web.post("/stats/reset", upstream.handle_reset),
            web.post("/config", upstream.handle_config),
            web.get("/health", upstream.handle_health),
        ]
    )
    return app


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=18081)
    p.add_argument("--delay-ms", type=float, default=100.0, help="mean delay (default 100)")
    p.add_argument("--distribution", choices=DISTRIBUTIONS, default="fixed")
    p.add_argument("--error-rate", type=float, default=0.0, help="fraction answered 500")
    p.add_argument("--stall-rate", type=float, default=0.0, help="fraction stalled --stall-ms more")
    p.add_argument("--stall-ms", type=float, default=0.0)
    p.add_argument("--backlog", type=int, default=4096)
    p.add_argument("--seed", type=int, default=None)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    upstream = Upstream(
        Delay(args.delay_ms, args.distribution),
        Faults(args.error_rate, args.stall_rate, args.stall_ms),
        args.seed,
    )
    web.run_app(
        make_app(upstream),
        host=args.host,
        port=args.port,
        backlog=args.backlog,
        access_log=None,
        print=None,
    )


if __name__ == "__main__":
    main()
