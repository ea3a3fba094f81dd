"""Child: one measured case (a server and an ab-style client) in a private network namespace,
or with the server in a container that the client reaches through a published port.

Usage: python -m experiments.netns_case SPEC_JSON   -> one JSON object on stdout

Why a child of its own: entering a namespace moves the calling process for good, so the lab
process must never do it; this child enters one first thing, then starts the server and the
client, which inherit it, and reads the kernel's TCP counters before and after the client runs.
The namespace goes away with the last of them.

A case without namespace settings runs in the host's namespace where no private one can be had
(counters are then shared with everything else on the machine, and say so); a case with settings
cannot, and answers `{"unavailable": "<one line>"}` instead of measuring. A client that cannot
run (`ab` missing or broken) answers `{"failed": "<one line>"}`.

A case with an `image` runs its server there, as `docker run -p` does, and its client on this
host (lab.backends.published): its settings become the container's sysctls, the counters are read
on both sides of the port (inside the container's namespace with `docker exec`, where its listen
queue drops SYNs; in the host's, where a userland proxy's SYN retransmissions are counted), and
the result names the path the connections took. No engine or image: "unavailable" likewise.

A case with a `front` ("nginx") runs its server on a unix socket (SOCKET in its argv) behind
nginx, both started inside the namespace: nginx's config is lab.front.nginx's (uwsgi_pass, the
knobs' documented defaults), its listen queue nginx's own default. The TCP counters are then the
client's connections to nginx; nginx's own error log says what it met behind it. No nginx:
"unavailable" likewise.
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from experiments import apachebench, netns
from experiments.common import free_port, serving
from lab.backends.containers import connect
from lab.backends.published import exec_text, image_or_why, port_path, published
from lab.front import nginx
from lab.record.errors import LabError
from lab.system.environment import read_sysctl
from lab.system.procs import start
from lab.system.resources import child_env

PORT = "{port}"  # in the server's argv and the URLs: the port, chosen inside the namespace
SOCKET = "{socket}"  # in a fronted server's argv: its unix socket, in the case's own temp dir
REASON = re.compile(r"failed \((\d+: [^)]*)\)")  # nginx's error log: why a connect/read failed
NGINX_BACKLOG = 511  # nginx's listen backlog when its config names none (Linux, NGX_LISTEN_BACKLOG)
HOST_SCOPE = "host (counters shared with everything else on this machine)"
CONTAINER_PORT = 3000  # the blog's `docker run -p 3000:3000`
CONTAINER_SCOPE = "container (its own namespace; host_counters: this host's, shared)"


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
    image: str = ""  # the server runs in this Docker image, reached through a published port
    front: str = ""  # "nginx": the server on a unix socket (SOCKET) behind nginx on the port

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
    r = apachebench.lab_client(
        url,
        spec.n,
        spec.c,
        spec.timeout_s,
        spec.deadline_s,
        spec.client_cpus,
        connect_timeout_s=spec.connect_timeout_s,
        expect=spec.expect,
        hlog=spec.hlog,
    )
    return {**r, "client": "lab"}


def measure(spec: CaseSpec) -> dict[str, Any]:
    """Serve, load, and count: the client's result with the namespace's counter deltas."""
    port = str(free_port())
    base = f"http://127.0.0.1:{port}"
    t0 = time.perf_counter()
    with serve(spec, port, base + spec.ready_path) as front:
        ready_s = time.perf_counter() - t0  # what starting the server (1,000 threads) cost
        before = netns.counters()
        r = load(spec, base)
        after = netns.counters()
    extra = {"nginx": front_evidence(front)} if front else {}
    return {
        **r,
        "counters": netns.delta(before, after),
        "server_ready_s": round(ready_s, 3),
        **extra,
    }


@contextmanager
def serve(spec: CaseSpec, port: str, ready_url: str) -> Iterator[Path | None]:
    """The case's server on `port`, or behind nginx there (yields where nginx's error log is
    kept once the case ends); used once `ready_url` answers."""
    log, cpus, env = Path(spec.log), spec.server_cpus or None, dict(spec.env)
    if not spec.front:
        argv = [arg.replace(PORT, port) for arg in spec.server]
        with serving(argv, ready_url, log, cpus=cpus, env=env, timeout_s=60):
            yield None
        return
    binary = nginx.binary()  # a LabError that says how to install it, before anything starts
    with tempfile.TemporaryDirectory(prefix="lab-blog-front-") as tmp:  # short: a socket path
        prefix, kept = Path(tmp), log.with_name(f"{log.stem}-nginx-error.log")
        sock = prefix / "app.sock"
        site = nginx.Site(f"127.0.0.1:{port}", NGINX_BACKLOG, f"unix:{sock}", True, 0)
        (prefix / "nginx.conf").write_text(nginx.config(nginx.FrontKnobs(), site, prefix))
        nginx.check(binary, prefix)
        argv = [arg.replace(SOCKET, str(sock)) for arg in spec.server]
        server = start(log.stem, argv, log_path=log, env={**child_env(), **env}, cpus=cpus or ())
        try:
            front_log = log.with_name(f"{log.stem}-nginx.log")
            with serving(nginx.argv(binary, prefix), ready_url, front_log, cpus, timeout_s=60):
                yield kept
        finally:
            server.stop()
            if (prefix / "error.log").exists():
                shutil.copyfile(prefix / "error.log", kept)


def front_evidence(kept: Path) -> dict[str, Any]:
    """nginx as the case ran it, and the errors it logged, by the reason nginx gives (a full
    listen queue on the server's socket: "11: Resource temporarily unavailable"), with the last
    few lines."""
    lines = kept.read_text(errors="replace").splitlines() if kept.exists() else []
    errors = [line for line in lines if "[error]" in line or "[crit]" in line]
    reasons = Counter(m.group(1) for line in errors if (m := REASON.search(line)))
    return {
        "kind": "nginx",
        "backlog": NGINX_BACKLOG,
        "knobs": asdict(nginx.FrontKnobs()),
        "error_lines": len(errors),
        "reasons": dict(reasons.most_common()),
        "last_errors": errors[-3:],
        "error_log": kept.name,
    }


def in_container(spec: CaseSpec) -> dict[str, Any]:
    """The server in spec.image behind a port published on 127.0.0.1, the client here; the
    counters on both sides of the port, the path between them, the settings as set inside."""
    client = connect()
    if why := image_or_why(client, spec.image):
        raise LabError(why)
    argv = [arg.replace(PORT, str(CONTAINER_PORT)) for arg in spec.server]
    ports = (CONTAINER_PORT, free_port())
    sysctls = netns.wanted(spec.settings)
    with published(client, spec.image, argv, ports, spec.env, sysctls, spec.server_cpus) as server:
        path = port_path(ports[1])
        inside, here = counters_inside(server.container), netns.counters()
        r = load(spec, server.url)
        inside_after, here_after = counters_inside(server.container), netns.counters()
        values = exec_text(server.container, ["cat", *(sysctl_file(n) for n in sysctls)])
        as_set = dict(zip(sysctls, values.split(), strict=True))
        log = Path(spec.log)
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_bytes(server.container.logs())
    return {
        **r,
        "counters": netns.delta(inside, inside_after),
        "host_counters": netns.delta(here, here_after),
        "server_ready_s": round(server.ready_s, 3),
        "namespace": CONTAINER_SCOPE,
        "settings": {n: as_set.get(n) for n in netns.SETTINGS},
        "path": path,
        "host_settings": {n: read_sysctl(n) for n in netns.SETTINGS},  # the proxy's side
    }


def counters_inside(container: Any) -> dict[str, int]:
    """The TCP counters of the container's network namespace, read inside it."""
    text = exec_text(container, ["cat", "/proc/net/netstat", "/proc/net/snmp"])
    return netns.parse_counters(text)


def sysctl_file(name: str) -> str:
    return "/proc/sys/" + name.replace(".", "/")


def main() -> None:
    spec = CaseSpec.from_json(sys.argv[1])
    # A TERM from the parent (its timeout) unwinds `serving`, so the server never outlives us.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if spec.client == "ab" and (why := apachebench.missing()):
        print(json.dumps({"failed": why}), flush=True)
        return
    if spec.image:
        try:
            print(json.dumps(in_container(spec)), flush=True)
        except LabError as e:
            print(json.dumps({"unavailable": str(e)}), flush=True)
        return
    try:
        scope, settings = namespace(spec)
    except netns.Unavailable as e:
        print(json.dumps({"unavailable": f"no private network namespace: {e}"}), flush=True)
        return
    try:
        result = measure(spec)
    except LabError as e:  # no nginx, or a config it refused: before anything started
        print(json.dumps({"unavailable": str(e)}), flush=True)
        return
    print(json.dumps({**result, "namespace": scope, "settings": settings}), flush=True)


if __name__ == "__main__":
    main()
