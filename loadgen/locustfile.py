"""Locust file for the web UI (and headless runs) in Compose: one FastHttpUser class per model.

Why one class per model: locust's class picker (`--class-picker`) then offers every server model
as a choice in the UI, and a headless run names the model as its user class
(`locust -f loadgen/locustfile.py --headless ... uwsgi-gevent`). Classes are generated from the
model registry, so a model added there appears here too. Each user is closed-loop with no think
time (like `ab -c N`): it calls `/io`, which makes the server wait on the mock upstream, and a
response counts as a success only if its body is byte-identical to the one every model must send.

Environment:
  LAB_DELAY_MS   upstream delay per request (default: 100)
  LAB_TARGETS    model=URL,... overrides (default: http://MODEL:8000, the Compose service name);
                 locust workers on other hosts set it to addresses they can reach
"""

from __future__ import annotations

import os

from locust import FastHttpUser, constant, task

from lab.models import Model, load_registry
from servers.common import io_body

DELAY_MS = int(os.environ.get("LAB_DELAY_MS", "100"))
EXPECTED_BODY, _ = io_body(200)


def target_urls(models: list[str], overrides: str) -> dict[str, str]:
    """Each model's base URL: its Compose service name, unless LAB_TARGETS says otherwise."""
    urls = {name: f"http://{name}:8000" for name in models}
    for pair in filter(None, (p.strip() for p in overrides.split(","))):
        name, _, url = pair.partition("=")
        urls[name.strip()] = url.strip()
    return urls


class ModelUser(FastHttpUser):
    """One model's user: GET /io in a closed loop, body checked."""

    abstract = True
    wait_time = constant(0)
    network_timeout = 120.0
    connection_timeout = 30.0

    @task
    def io(self) -> None:
        with self.client.get(
            f"/io?delay_ms={DELAY_MS}", name="/io", catch_response=True
        ) as response:
            if response.status_code == 200 and response.content != EXPECTED_BODY:
                response.failure(f"unexpected body {response.content[:80]!r}")


def _user_class(model: Model, url: str) -> type[ModelUser]:
    kind = "baseline: needs Compose profile 'baselines'" if model.baseline else "core model"
    doc = f"{model.description} ({kind})"
    return type(model.name, (ModelUser,), {"host": url, "__doc__": doc, "abstract": False})


_models = list(load_registry().models.values())
_urls = target_urls([m.name for m in _models], os.environ.get("LAB_TARGETS", ""))
globals().update({m.name: _user_class(m, _urls[m.name]) for m in _models})
