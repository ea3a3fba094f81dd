"""Child: one measured case (a server and an ab-style client) in a private network namespace.

Usage: python -m experiments.netns_case SPEC_JSON   -> one JSON object on stdout

Why a child of its own: entering a namespace moves the calling process for good, so the lab
process must never do it; this child enters one first thing, then starts the server and the
client, which inherit it, and reads the kernel's TCP counters before and after the client runs.
The namespace goes away with the last of them.

A case without namespace settings runs in the host's namespace where no private one can be had
(counters are then shared with everything else on the machine, and say so); a case with settings
cannot, and answers `{"unavailable": "<one line>"}` instead of measuring. A client that cannot
run (`ab` missing or broken) answers `{"failed": "<one line>"}`.
"""

from __future__ import annotations

import json
import signal
import sys
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from experiments import apachebench, netns
from experiments.common import free_port, run_child, serving
from lab.system.environment import read_sysctl

PORT = "{port}"  # in the server's argv and the URLs: the port, chosen inside the namespace
HOST_SCOPE = "host (counters shared with everything else on this machine)"


@dataclass(frozen=True)
class CaseSpec:
    """Everything the child needs: the server, the client's run, the namespace's settings."""

    server: tuple[str, ...]  # argv, with PORT where the port goes
    ready_path: str
    path: str
    n: int
    c: int
    timeout_s: float  # per request, after the connect
    connect_timeout_s: float  # per connect; above the kernel's own limit to leave it to the kernel
    deadline_s: float  # the whole client run
    log: str
    hlog: str = ""
    expect: str = ""
    env: Mapping[str, str] = field(default_factory=dict)
    settings: Mapping[str, str] = field(default_factory=dict)  # netns.SETTINGS overrides
    server_cpus: tuple[int, ...] = ()
    client_cpus: tuple[int, ...] = ()
    client: str = "lab"  # "lab": experiments.abclient; "ab": ApacheBench

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> CaseSpec:
        data: dict[str, Any] = json.loads(text)
        for name in ("server", "server_cpus", "client_cpus"):
            data[name] = tuple(data[name])
        return cls(**data)


def namespace(spec: CaseSpec) -> tuple[str, dict[str, str | None]]:
    """Enter a private namespace ("private", settings as set), or stay in the host's when the
    case has no settings of its own; netns.Unavailable when it has and none can be had."""
    try:
        return "private", netns.enter(spec.settings)
    except netns.Unavailable:
        if spec.settings:
            raise
        return HOST_SCOPE, {name: read_sysctl(name) for name in netns.SETTINGS}


def load(spec: CaseSpec, base: str) -> dict[str, Any]:
    """Run the case's client against `base` (http://127.0.0.1:PORT) and return its result."""
    url = base + spec.path
    if spec.client == "ab":
        return apachebench.run(
            url, spec.n, spec.c, spec.timeout_s, spec.deadline_s, spec.client_cpus
        )
    args = [
        *[url, "-n", str(spec.n), "-c", str(spec.c), "--timeout", str(spec.timeout_s)],
        *["--connect-timeout", str(spec.connect_timeout_s), "--deadline", str(spec.deadline_s)],
        *(["--expect", spec.expect] if spec.expect else []),
        *(["--hlog", spec.hlog] if spec.hlog else []),
    ]
    (r,) = run_child("experiments.abclient", args, spec.deadline_s + 60, spec.client_cpus or None)
    return {**r, "client": "lab"}


def measure(spec: CaseSpec) -> dict[str, Any]:
    """Serve, load, and count: the client's result with the namespace's counter deltas."""
    port = str(free_port())
    base = f"http://127.0.0.1:{port}"
    argv = [arg.replace(PORT, port) for arg in spec.server]
    t0 = time.perf_counter()
    with serving(
        argv,
        base + spec.ready_path,
        Path(spec.log),
        cpus=spec.server_cpus or None,
        env=dict(spec.env),
        timeout_s=60,
    ):
        ready_s = time.perf_counter() - t0  # what starting the server (1,000 threads) cost
        before = netns.counters()
        r = load(spec, base)
        after = netns.counters()
    return {**r, "counters": netns.delta(before, after), "server_ready_s": round(ready_s, 3)}


def main() -> None:
    spec = CaseSpec.from_json(sys.argv[1])
    # A TERM from the parent (its timeout) unwinds `serving`, so the server never outlives us.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        scope, settings = namespace(spec)
    except netns.Unavailable as e:
        print(json.dumps({"unavailable": f"no private network namespace: {e}"}), flush=True)
        return
    if spec.client == "ab" and (why := apachebench.missing()):
        print(json.dumps({"failed": why}), flush=True)
        return
    result = measure(spec)
    print(json.dumps({**result, "namespace": scope, "settings": settings}), flush=True)


if __name__ == "__main__":
    main()
