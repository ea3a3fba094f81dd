"""Server CPU and RSS per model for the lab page: the native process tree, or its container's meter.

Why here and not in loadgen: finding a server (a pid `lab ui` started, the meter beside a Compose
service's server) is the lab's knowledge. `lab ui` passes the pids in LAB_SERVER_PIDS; in Compose,
LAB_METER_PORT names the port on which each model's container serves its meter (`lab.webui.meter`),
at the host of the model's own URL.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
import urllib.parse
import urllib.request
from dataclasses import replace

import psutil

from lab.system.sampling import Meter, Reading, TreeMeter

PIDS_ENV = "LAB_SERVER_PIDS"  # model=pid,... of the native servers
FRONT_PIDS_ENV = "LAB_FRONT_PIDS"  # model=pid,... of nginx's masters in front of them
METER_PORT_ENV = "LAB_METER_PORT"  # the port of each model container's meter (lab.webui.meter)
METER_TIMEOUT_S = 1.0


def pairs(text: str) -> dict[str, str]:
    """`a=1,b=2` into {"a": "1", "b": "2"} (the shape of every LAB_* list variable)."""
    items = (p.partition("=") for p in text.split(",") if p.strip())
    return {k.strip(): v.strip() for k, _, v in items}


class RemoteMeter:
    """A `lab.webui.meter` over HTTP: CPU% from two readings of its CPU seconds, RSS as read.
    `part` "front": the nginx in front of the server (a KeyError where there is none)."""

    def __init__(self, url: str, part: str = "") -> None:
        self.url, self.part = url, part
        self.last = self._read()

    def _read(self) -> tuple[float, float, Reading]:
        with urllib.request.urlopen(self.url, timeout=METER_TIMEOUT_S) as reply:
            body = json.load(reply)
        body = body[self.part] if self.part else body
        memory = Reading(0.0, float(body["rss_mb"]), float(body["pss_mb"]))
        return time.monotonic(), float(body["cpu_s"]), memory

    def sample(self) -> Reading:
        (t0, cpu0, _), (t1, cpu1, memory) = self.last, (now := self._read())
        self.last = now
        return replace(memory, cpu_pct=round(100 * (cpu1 - cpu0) / max(t1 - t0, 1e-9), 1))


def meters(targets: dict[str, str], front: bool = False) -> dict[str, Meter]:
    """A meter per model (model -> its base URL) that can be measured; one with none shows no
    CPU or RSS. `front`: the nginx in front of each model that has one, instead."""
    out: dict[str, Meter] = {}
    part = "front" if front else ""
    for model, pid in pairs(os.environ.get(FRONT_PIDS_ENV if front else PIDS_ENV, "")).items():
        with contextlib.suppress(psutil.Error, ValueError):
            out[model] = TreeMeter(int(pid))
    if port := os.environ.get(METER_PORT_ENV, ""):
        for model, url in targets.items():
            host = urllib.parse.urlsplit(url).hostname
            if model not in out and host:
                host = f"[{host}]" if ":" in host else host
                with contextlib.suppress(OSError, ValueError, KeyError):
                    out[model] = RemoteMeter(f"http://{host}:{port}/", part)
    return out
