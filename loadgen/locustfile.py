"""Locust file for the web UI and headless runs: one closed-loop user class per server model.

Why one class per model: locust's class picker (`--class-picker`) offers every model as a choice,
a headless run names models as user classes, and request names carry the model (`uwsgi-gevent
/io`), so the statistics table has one row per model. At start-up the master (or a local runner)
asks every target's /health and keeps only models that answer: the picker offers and preselects
exactly what runs (Compose baselines appear when their profile is up). The run parameters (delay,
distribution, route, user split) are custom arguments shown in the start form. On a worker, each
model's requests are kept per second and sent to the master when it rolls (the lab page's
figures, `loadgen.fanout`), since the master itself makes no requests.

Environment:
  LAB_TARGETS    model=URL,... (default: every model of servers/models.toml at http://MODEL:8000,
                 its Compose service name, and MODEL+nginx at http://MODEL-nginx:8000, the
                 `front` profile's); `lab ui` and remote workers set it
"""

from __future__ import annotations

import ipaddress
import logging
import os
import random
import socket
import time
import tomllib
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import gevent.pool
from locust import events
from locust.env import Environment
from locust.runners import WorkerRunner

from loadgen import fanout, runparams
from loadgen.live import ModelIntervals
from loadgen.recording import CpuMeter
from loadgen.request import Request
from loadgen.users import ModelUser, model_user

MODELS_TOML = Path(__file__).resolve().parent.parent / "servers" / "models.toml"
HEALTH_TIMEOUT_S = 2.0
STARTING_WAIT_S = 30.0  # how long a target that exists (its name resolves) may take to answer
FRONTED = "+nginx"  # a model behind nginx (lab.record.models.FRONTED; the users do not import lab)
log = logging.getLogger("concurrency-lab")


def registry_models(path: Path = MODELS_TOML) -> dict[str, dict[str, Any]]:
    """Model name -> its registry table (description, baseline), read without the lab."""
    return dict(tomllib.loads(path.read_text()).get("models", {}))


def target_urls(models: list[str], overrides: str) -> dict[str, str]:
    """Each model's base URL. With LAB_TARGETS set, exactly the models it names."""
    pairs = [p.strip() for p in overrides.split(",") if p.strip()]
    if not pairs:
        bare = {name: f"http://{name}:8000" for name in models}
        return bare | {name + FRONTED: f"http://{name}-nginx:8000" for name in models}
    return {name.strip(): url.strip() for name, _, url in (p.partition("=") for p in pairs)}


def runs_app(table: dict[str, Any]) -> str:
    """How the model serves a Flask app, from its registry table (the lab's own rule,
    lab.config.models, read without importing the lab: the users must not)."""
    if table.get("bridge"):
        return "bridged"
    return "as is" if table.get("app") == "wsgi" else "async port"


def healthy(url: str) -> bool:
    """Whether the target answers /health; one named by a host name that resolves (a Compose
    service that is up, maybe still starting) gets STARTING_WAIT_S to answer. An address
    (`lab ui`'s, started and ready before locust) is asked once."""
    deadline = time.monotonic() + STARTING_WAIT_S
    while True:
        try:
            with urllib.request.urlopen(url + "/health", timeout=HEALTH_TIMEOUT_S) as reply:
                return bool(reply.status == 200)
        except OSError:
            if time.monotonic() > deadline or not _named_and_resolves(url):
                return False
        gevent.sleep(1.0)


def _named_and_resolves(url: str) -> bool:
    host = urllib.parse.urlsplit(url).hostname or ""
    try:
        ipaddress.ip_address(host)
        return False
    except ValueError:
        pass
    try:
        return bool(socket.getaddrinfo(host, None))
    except (OSError, UnicodeError):
        return False


class Plan:
    """The request plan every user calls: reads the run parameters from the live options."""

    environment: Environment | None = None
    rng = random.Random()

    @classmethod
    def next(cls) -> Request:
        options = cls.environment.parsed_options if cls.environment else None
        return runparams.request_for(runparams.RunParams.of(options), cls.rng)


def _classes() -> dict[str, type[ModelUser]]:
    registry = registry_models()
    urls = target_urls(list(registry), os.environ.get("LAB_TARGETS", ""))
    out = {}
    for name, url in urls.items():
        table = registry.get(name.removesuffix(FRONTED), {})
        kind = "baseline: Compose profile 'baselines'" if table.get("baseline") else "model"
        kind = "behind nginx: Compose profile 'front'" if name.endswith(FRONTED) else kind
        how = runs_app(table) if table else ""
        label = f"; your app: {how}" if how else ""
        doc = f"{table.get('description', name)} ({kind}{label})"
        out[name] = model_user(name, url, Plan.next, doc=doc, runs_app=how)
    return out


USER_CLASSES = _classes()
globals().update(USER_CLASSES)


@events.init_command_line_parser.add_listener
def _arguments(parser: Any) -> None:
    runparams.add_arguments(parser)


@events.init.add_listener
def _only_what_runs(environment: Environment, **_: Any) -> None:
    """Offer and preselect only models whose service answers /health (not on workers: they
    take the master's choice)."""
    Plan.environment = environment
    if isinstance(environment.runner, WorkerRunner):
        _report_to_master(environment.runner)
        return
    names = [c.__name__ for c in environment.user_classes]
    answers = gevent.pool.Pool(16).map(lambda n: healthy(USER_CLASSES[n].host or ""), names)
    up = [n for n, ok in zip(names, answers, strict=True) if ok]
    if down := sorted(set(names) - set(up)):
        log.warning("not offered (no answer to /health): %s", ", ".join(down))
    environment.user_classes = [USER_CLASSES[n] for n in up]
    if environment.available_user_classes is not None:
        environment.available_user_classes = {n: USER_CLASSES[n] for n in up}  # type: ignore[misc]  # locust annotates classes as instances


def _report_to_master(runner: WorkerRunner) -> None:
    """Answer each roll of the master's lab page with every model's interval since the last."""
    intervals, cpu = ModelIntervals(), CpuMeter()
    runner.environment.events.request.add_listener(intervals.on_request)

    def on_roll(msg: Any, **_: Any) -> None:
        report = fanout.ModelsReport.of(int(msg.data["seq"]), intervals.take(), cpu.lap())
        runner.send_message(fanout.MODELS_INTERVAL, report.to_data())

    runner.register_message(fanout.ROLL, on_roll)


@events.test_start.add_listener
def _split(environment: Environment, **_: Any) -> None:
    """Apply the per-model user split as class weights at every start."""
    params = runparams.RunParams.of(environment.parsed_options)
    classes = environment.user_classes
    for name, weight in runparams.weights(params.split, [c.__name__ for c in classes]).items():
        USER_CLASSES[name].weight = weight
