"""Scenarios: what a run measures, declared in TOML (`quick` and `standard` ship with the lab)."""

from __future__ import annotations

import resource
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from lab.config import appenv, upstreamroute
from lab.config.mix import MixRoute
from lab.config.toml import above_zero, check_name, check_table, in_range, load_toml
from lab.record.errors import LabError, Refused
from lab.record.login import Login
from lab.record.step import level_label
from lab.system.appvenv import AppPins
from lab.system.resources import data_file

SCENARIO_DIR = data_file("loadgen", "scenarios")
ROUTES = ("io", "sleep", "cpu", "db", "cache")
DB_ROUTES = {"db": "postgres", "cache": "redis"}  # route -> the database it waits in
MODES = ("closed", "open")
ARRIVALS = ("constant", "poisson")
PROFILES = ("auto", "all", "off")  # the server's stacks sampled per step (`lab.run.profiled`)
ENGINES = ("oha", "lab")  # who sends a step's requests (`lab.run.engine`)
DISTRIBUTIONS = ("fixed", "uniform", "exponential", "lognormal")
FDS_PER_CONNECTION = 2  # a server holds the client's socket and its own upstream socket
FD_MARGIN = 256  # listening sockets, logs, libraries
# Upper bounds: beyond these a value is a typo (ms for s, an extra zero), not an experiment.
LIMITS = {
    "duration_s": 86_400,
    "warmup_s": 3_600,
    "settle_s": 600,
    "trials": 100,
    "remeasure": 10,
    "request_timeout_s": 3_600,
    "start_timeout_s": 600,
    "probe_k": 1_000,
    "probe_delay_ms": 60_000,
    "cpu_n": 100_000_000,
    "delay_ms": 600_000,
    "stall_ms": 600_000,
    "level": 1_000_000,
    "rate_rps": 1_000_000,  # also the bound on max_outstanding
}


@dataclass(frozen=True)
class UpstreamSpec:
    """The mock upstream's behaviour for a run."""

    delay_ms: float = 100.0
    distribution: str = "fixed"
    error_rate: float = 0.0
    stall_rate: float = 0.0
    stall_ms: float = 0.0
    routes: tuple[str, ...] = ()  # per-route rules (lab.config.upstreamroute), as given

    def argv_flags(self) -> list[str]:
        return [
            *["--delay-ms", str(self.delay_ms), "--distribution", self.distribution],
            *["--error-rate", str(self.error_rate), "--stall-rate", str(self.stall_rate)],
            *["--stall-ms", str(self.stall_ms)],
            *(["--routes", upstreamroute.as_json(self.routes)] if self.routes else []),
        ]


@dataclass(frozen=True)
class AppSpec:
    """A user's own app under load (`lab run --app`), as `lab.run.appcheck` found it.

    There is no upstream delay to compare with, so d in the ideal c / d is the load route's own
    time with nothing else running (`solo_ms`, the fastest of the models' single requests).
    """

    target: str  # package.module:attribute
    kind: str  # wsgi or asgi
    routes: tuple[str, ...]  # the routes checked, as given (`/orders/42`, `POST /orders`)
    health_path: str  # the first GET route: what answers in place of /health
    load_path: str  # the route every user requests (the probe route)
    solo_ms: float
    method: str = "GET"  # the load route's method, body and headers
    body: str | None = None
    headers: tuple[tuple[str, str], ...] = ()
    env: appenv.Env = ()  # --env and [env], placeholders as given (resolved per server)
    # A traffic mix (`lab.config.mix`): the routes the users draw by weight; (): load_path alone.
    mix: tuple[MixRoute, ...] = ()
    login: Login | None = None  # each user's login before its first request (lab.record.login)
    environment: AppPins | None = None  # its own pins and venv (lab.system.appvenv); None: lab's
    framework: str = ""  # its framework, as the import check found it (userapp.FRAMEWORKS)


@dataclass(frozen=True)
class Point:
    """One point of a sweep: closed loop, `users` users; open loop, `rate_rps` with a cap."""

    users: int  # closed: simultaneous users; open: the cap on outstanding requests
    rate_rps: float | None = None  # open loop only: the target arrival rate

    @property
    def label(self) -> str:
        return level_label(self.users, self.rate_rps)

    @property
    def load(self) -> float:
        """How heavy the point is, to pick the warm-up point: the heaviest."""
        return self.users if self.rate_rps is None else self.rate_rps


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str = ""
    models: tuple[str, ...] = (
        "uwsgi-threads",
        "uwsgi-gevent",
        "gunicorn-gevent",
        "gunicorn-asyncio",
    )
    levels: tuple[int, ...] = (1, 10, 50, 100, 200)
    duration_s: float = 5.0
    warmup_s: float = 3.0
    settle_s: float = 1.0
    trials: int = 1
    # The steps the lab or the machine kept from a result are measured again after the trials,
    # within this share of the trials' own time (0: never; `lab.run.remeasure`).
    remeasure: float = 0.5
    # The models' order in each trial is shuffled from this seed (-1: a new seed per run, kept in
    # the manifest), so slow drift on the machine does not always fall on the same model.
    order_seed: int = -1
    mode: str = "closed"  # closed: `levels` of users; open: `rates` of arrivals (req/s)
    rates: tuple[float, ...] = ()
    max_outstanding: int = 500  # open loop: requests in flight at most; the rest count as dropped
    arrival: str = "constant"  # open loop: constant spacing or poisson
    engine: str = "oha"  # oha where it can run the step (`lab.run.engine`), or "lab"
    # Off by default: on a CPU-bound many-thread server (gunicorn-gthread, 1 process, 100 users at
    # 5 ms) the sampler cut throughput from 813 to 283 req/s on 2 cores (docs/benchmarks.md).
    profile: str = "off"  # py-spy per step (`lab.run.profiled`): off (its cost, below), auto, all
    route: str = "io"  # io: upstream; sleep: in-process; cpu: CPU work; db/cache: PostgreSQL/Redis
    cpu_n: int = 10_000
    request_timeout_s: float = 30.0
    probe_k: int = 32  # the probe's widest stage (lab.run.preflight.NARROW first)
    probe_delay_ms: float = 300.0
    pin_cpus: bool = True  # server on its own core, load generator and upstream on the others
    host: str = "127.0.0.1"  # where every listener binds and the load goes; loopback unless allowed
    start_timeout_s: float = 30.0  # a server not answering /health by then is `start_failed`
    server_port: int = 0  # 0 = any free port
    upstream_port: int = 0
    upstream: UpstreamSpec = field(default_factory=UpstreamSpec)
    knobs: dict[str, Any] = field(default_factory=dict)
    app: AppSpec | None = None  # set by `lab run --app`, never by a scenario file
    env: dict[str, str] = field(default_factory=dict)  # [env]: the user's app's environment
    # --app's routes, as --path takes them (`/orders#5`: weighted, `lab.config.mix`); --path
    # replaces them.
    paths: tuple[str, ...] = ()

    def points(self) -> list[Point]:
        if self.mode == "open":
            return [Point(self.max_outstanding, float(rate)) for rate in self.rates]
        return [Point(level) for level in self.levels]

    @property
    def max_connections(self) -> int:
        return max(p.users for p in self.points())

    @property
    def delay_ms(self) -> float:
        """d in the closed-loop ideal throughput c / d."""
        if self.app is not None:
            return self.app.solo_ms
        return 0.0 if self.route == "cpu" else self.upstream.delay_ms

    @property
    def health_path(self) -> str:
        """What a server must answer on, with a status under 500, to be up and not hung (a
        user's app has no /health: its first route; `lab.system.http_client.serving`)."""
        return self.app.health_path if self.app is not None else "/health"

    def path(self) -> str:
        if self.app is not None:
            return self.app.load_path
        match self.route:
            case "io":
                return "/io"
            case "sleep":
                return f"/sleep?ms={int(self.upstream.delay_ms)}"
            case "db" | "cache":  # the upstream's delay, spent waiting in the database
                return f"/{self.route}?delay_ms={int(self.upstream.delay_ms)}"
        return f"/cpu?n={self.cpu_n}"

    def validate(self, said: Mapping[str, str] | None = None) -> Scenario:
        """The scenario, checked; `said` names a setting as the user gave it (`duration_s`:
        `--duration`), so an error names the option typed, not the scenario's key."""
        where = f"scenario {self.name}"
        said = said or {}

        def at(name: str) -> str:
            return said.get(name) or f"{where}: {name}"

        check_name(self.name, "scenario")
        if not self.models:
            raise LabError(f"{at('models')}: no models to run")
        for model in self.models:
            check_name(model, f"{where}: models")
        self._check_points(where, at)
        for name in (
            "duration_s",
            "settle_s",
            "request_timeout_s",
            "probe_delay_ms",
            "trials",
            "probe_k",
            "cpu_n",
            "start_timeout_s",
        ):
            above_zero(getattr(self, name), LIMITS[name], at(name))
        in_range(self.warmup_s, 0, LIMITS["warmup_s"], at("warmup_s"))
        in_range(self.remeasure, 0, LIMITS["remeasure"], at("remeasure"))
        if not -1 <= self.order_seed < 2**32:
            raise LabError(f"{at('order_seed')}: must be -1 (a new one per run) or 0 to 2^32 - 1")
        if not self.host or not isinstance(self.host, str) or any(c in self.host for c in "/ @"):
            raise LabError(f"{at('host')}: must be a host name or address, got {self.host!r}")
        if self.mode not in MODES:
            raise LabError(f"{at('mode')}: must be one of {', '.join(MODES)}, got {self.mode!r}")
        if self.mode == "open":
            if not self.rates:
                raise LabError(_needs_rates(where, said))
            in_range(self.max_outstanding, 1, LIMITS["level"], at("max_outstanding"))
            if self.arrival not in ARRIVALS:
                raise LabError(f"{at('arrival')}: must be one of {', '.join(ARRIVALS)}")
        if self.engine not in ENGINES:
            raise LabError(f"{where}: engine must be one of {', '.join(ENGINES)}")
        if self.profile not in PROFILES:
            raise LabError(f"{where}: profile must be one of {', '.join(PROFILES)}")
        if self.route not in ROUTES and not (self.route == "app" and self.app):
            raise LabError(f"{where}: route must be one of {', '.join(ROUTES)}, got {self.route!r}")
        up = self.upstream
        if up.distribution not in DISTRIBUTIONS:
            raise LabError(
                f"{where}: upstream.distribution must be one of {', '.join(DISTRIBUTIONS)}"
            )
        for name in ("delay_ms", "stall_ms", "error_rate", "stall_rate"):
            top = LIMITS.get(name, 1)  # the rates are fractions
            in_range(getattr(up, name), 0, top, said.get(name) or f"{where}: upstream.{name}")
        upstreamroute.check(tuple(up.routes), said.get("routes") or f"{where}: upstream.routes")
        for port in ("server_port", "upstream_port"):
            if not 0 <= getattr(self, port) <= 65535:
                raise LabError(f"{at(port)}: must be 0-65535, got {getattr(self, port)}")
        appenv.from_table(self.env, where)
        return self

    def _check_points(self, where: str, at: Callable[[str], str]) -> None:
        """Levels and rates: positive, bounded, and each once (a duplicate would overwrite the
        other's histogram and be reported as a second trial; use `trials` for repeats)."""
        if not self.levels:
            raise LabError(f"{where}: no levels to run")
        for level in self.levels:
            if not isinstance(level, int) or isinstance(level, bool) or level <= 0:
                raise LabError(f"{at('levels')}: must be positive whole numbers, got {level!r}")
            in_range(level, 1, LIMITS["level"], at("levels"))
        for rate in self.rates:
            if isinstance(rate, bool) or not isinstance(rate, int | float) or not rate > 0:
                raise LabError(f"{at('rates')}: must be positive numbers, got {rate!r}")
            above_zero(rate, LIMITS["rate_rps"], f"{at('rates')} (req/s)")
        for what, values in (
            ("models", self.models),
            ("levels", self.levels),
            ("rates", self.rates),
        ):
            twice = sorted({v for v in values if list(values).count(v) > 1}, key=str)
            if twice:
                raise LabError(
                    f"{where}: {what} listed more than once: {', '.join(map(str, twice))}; "
                    f"list each once (use trials = N / --trials N to repeat)"
                )

    def check_open_files(self) -> dict[str, int]:
        """Raise the soft open-file limit to the hard one if needed; fail if even that is short.

        Returns what the run needs and runs with, for the manifest (-1 = unlimited).
        """
        need = FDS_PER_CONNECTION * self.max_connections + FD_MARGIN
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        record = {"needed": need, "soft_before": soft, "soft": soft, "hard": hard}
        if soft >= need:
            return record
        if hard != resource.RLIM_INFINITY and hard < need:
            raise Refused(
                f"{self.max_connections} connections need about {need} open files but the limit is "
                f"{soft} (hard {hard}); raise it, e.g. `ulimit -n {need}` as root, "
                f"LimitNOFILE= for a service, or nofile in /etc/security/limits.conf "
                f"(see tuning/)"
            )
        try:
            resource.setrlimit(
                resource.RLIMIT_NOFILE, (need if hard == resource.RLIM_INFINITY else hard, hard)
            )
        except (ValueError, OSError) as e:  # above fs.nr_open, even with an unlimited hard limit
            raise Refused(
                f"{self.max_connections} connections need about {need} open files, more than "
                f"this system allows ({e}); lower the level or raise fs.nr_open (see `lab doctor`)"
            ) from None
        return {**record, "soft": resource.getrlimit(resource.RLIMIT_NOFILE)[0]}


_NUMBER = (int, float)
SCENARIO_TYPES: dict[str, type | tuple[type, ...]] = {
    "description": str,
    "models": list,
    "levels": list,
    "duration_s": _NUMBER,
    "warmup_s": _NUMBER,
    "settle_s": _NUMBER,
    "trials": int,
    "remeasure": _NUMBER,
    "order_seed": int,
    "mode": str,
    "route": str,
    "cpu_n": int,
    "request_timeout_s": _NUMBER,
    "probe_k": int,
    "probe_delay_ms": _NUMBER,
    "pin_cpus": bool,
    "server_port": int,
    "upstream_port": int,
    "upstream": dict,
    "knobs": dict,
    "env": dict,
    "host": str,
    "start_timeout_s": _NUMBER,
    "rates": list,
    "max_outstanding": int,
    "arrival": str,
    "engine": str,
    "profile": str,
    "paths": list,
}


UPSTREAM_TYPES: dict[str, type | tuple[type, ...]] = {
    "delay_ms": _NUMBER,
    "distribution": str,
    "error_rate": _NUMBER,
    "stall_rate": _NUMBER,
    "stall_ms": _NUMBER,
    "routes": list,
}


def builtin_names() -> list[str]:
    return sorted(p.stem for p in SCENARIO_DIR.glob("*.toml"))


def load_scenario(name_or_path: str) -> Scenario:
    """A built-in scenario by name, or a scenario file by path."""
    path = Path(name_or_path)
    if not path.suffix and not path.exists():
        path = SCENARIO_DIR / f"{name_or_path}.toml"
        if not path.exists():
            raise LabError(
                f"unknown scenario {name_or_path!r}; built-in: {', '.join(builtin_names())}, "
                f"or give the path of a .toml file"
            )
    data = check_table(load_toml(path), str(path), SCENARIO_TYPES)
    upstream = check_table(data.pop("upstream", {}), f"{path}: [upstream]", UPSTREAM_TYPES)
    if "routes" in upstream:
        upstream["routes"] = tuple(upstream["routes"])
    for key in ("models", "levels", "rates", "paths"):
        if key in data:
            data[key] = tuple(data[key])
    for key in ("models", "paths"):
        if not all(isinstance(m, str) for m in data.get(key, ())):
            raise LabError(f"{path}: {key} must be a list of strings")
    return Scenario(name=path.stem, upstream=UpstreamSpec(**upstream), **data).validate()


def _needs_rates(where: str, said: Mapping[str, str]) -> str:
    """Open loop without rates, said in the words the user wrote: a scenario file's keys, or
    the options typed (a file is refused at load, so here `--mode open` was typed)."""
    if "mode" in said:
        return f"{said['mode']} open needs --rates, e.g. --rates 50,100,200"
    return f"{where}: open mode needs rates, e.g. rates = [50, 100, 200]"


def override(scenario: Scenario, said: Mapping[str, str] | None = None, **changes: Any) -> Scenario:
    """The scenario with the CLI's overrides (None = not given) applied, then validated; `said`:
    each field as the user typed it (`duration_s`: `--duration`), for the errors to name."""
    given = {k: v for k, v in changes.items() if v is not None}
    upstream_changes = {k: given.pop(k) for k in list(given) if k in UPSTREAM_TYPES}
    names = {f.name for f in fields(Scenario)}
    unknown = set(given) - names
    if unknown:
        raise LabError(f"unknown scenario setting(s): {', '.join(sorted(unknown))}")
    return replace(
        scenario, upstream=replace(scenario.upstream, **upstream_changes), **given
    ).validate(said)
