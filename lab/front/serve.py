"""Starting a model behind nginx: the server on a unix socket (uWSGI) or a private port (HTTP
servers), nginx on the port the load targets, both pinned to the server's cores.

`FrontedBackend` wraps the native backend: models whose `front` is "nginx" are started behind
it, the others as before, so bare and fronted variants run side by side in one sweep. nginx runs
in the foreground as the lab's own child (its own process group and pid file, so Ctrl-C, a crash
and the next run's leftover check all stop it), with its config, pid file and temp paths in a
temporary prefix of its own, never the system's.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from lab.backends.base import NativeBackend, Server
from lab.config.models import Knobs, Model, server_env
from lab.config.scenario import UpstreamSpec
from lab.front import nginx
from lab.system import procs
from lab.system.resources import CODE_ROOT
from lab.system.sampling import Meter, TreeMeter

# What nginx's error log says when nginx itself ran out. Not its complaints about the server
# ("connect() to ... failed (11: Resource temporarily unavailable)": the server's accept queue
# was full; "upstream timed out": the server was slow): those are the model's limit, and reach
# the client as 502/504 errors, which the verdict reads as any server's errors.
LIMIT_SIGNS = ("worker_connections are not enough", "Too many open files")


@dataclass
class FrontLog:
    """nginx's error log, read from a mark: what it said during one measured window."""

    path: Path
    offset: int = 0

    def mark(self) -> None:
        with contextlib.suppress(OSError):
            self.offset = self.path.stat().st_size

    def since(self) -> list[str]:
        """Lines since the mark that say nginx itself ran out (at most 5 kept)."""
        try:
            with open(self.path, errors="replace") as f:
                f.seek(self.offset)
                lines = f.read().splitlines()
        except OSError:
            return []
        return [line for line in lines if any(s in line for s in LIMIT_SIGNS)][-5:]


@dataclass
class FrontedServer:
    """A model behind nginx: `url` is nginx's; `meter` is the server's alone, `front_meter`
    nginx's, so each one's CPU is reported apart."""

    name: str
    url: str
    argv: list[str]
    proc: procs.Proc  # the model's server
    front: procs.Proc  # nginx's master (its workers are in its process group)
    prefix: Path  # nginx's prefix in the run directory: its config, error log and temp paths
    front_workers: int = 1
    scratch: Path | None = None  # a short temp dir for uWSGI's socket (a long run dir path)
    private_port: int = 0  # an HTTP server's own port behind nginx (0: uWSGI's unix socket)
    front_log: FrontLog = field(init=False)

    def __post_init__(self) -> None:
        self.front_log = FrontLog(self.prefix / "error.log")

    def alive(self) -> bool:
        return self.proc.alive() and self.front.alive()

    def meter(self) -> Meter | None:
        return _meter(self.proc)

    def front_meter(self) -> Meter | None:
        return _meter(self.front)

    def evidence(self) -> dict[str, Any]:
        tail = self.front.log_tail() + FrontLog(self.prefix / "error.log").since()
        return {
            **self.proc.evidence(),
            "front": {"exit_code": self.front.popen.poll(), "log": tail},
        }

    def stop(self) -> None:
        self.front.stop()
        self.proc.stop()
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)


def _meter(proc: procs.Proc) -> Meter | None:
    try:
        return TreeMeter(proc.pid)
    except Exception:  # the process is already gone: nothing to measure
        return None


class FrontedBackend:
    """The native backend, with nginx in front of every model whose `front` says so."""

    def __init__(self, inner: NativeBackend, knobs: nginx.FrontKnobs, binary: str) -> None:
        self.inner, self.knobs, self.binary = inner, knobs, binary
        self.name = inner.name

    def start_upstream(self, spec: UpstreamSpec, port: int) -> Server:
        return self.inner.start_upstream(spec, port)

    def loadgen_cpus(self) -> tuple[int, ...]:
        return self.inner.loadgen_cpus()

    def describe(self) -> dict[str, Any]:
        front = {"kind": "nginx", "binary": self.binary, "knobs": asdict(self.knobs)}
        front["pinned"] = "beside the server, on its cores"
        return {**self.inner.describe(), "front": front}

    def close(self) -> None:
        self.inner.close()

    def start_server(self, model: Model, knobs: Knobs, upstream_url: str, port: int) -> Server:
        if not model.front:
            return self.inner.start_server(model, knobs, upstream_url, port)
        procs.ensure_port_free(self.inner.host, port, f"{model.name}'s nginx")
        prefix = self.inner.run_dir / "front" / model.name
        prefix.mkdir(parents=True, exist_ok=True)
        socket = prefix / "app.sock"
        long = "--http-socket" in model.argv and len(str(socket)) > 100  # uWSGI's socket only
        scratch = Path(tempfile.mkdtemp(prefix="lab-front-")) if long else None
        socket = scratch / "app.sock" if scratch else socket  # unix socket paths: 107 bytes
        try:
            return self._start(model, knobs, upstream_url, port, prefix, socket)
        except BaseException:
            if scratch is not None:
                shutil.rmtree(scratch, ignore_errors=True)
            raise

    def _start(
        self, model: Model, knobs: Knobs, upstream_url: str, port: int, prefix: Path, sock: Path
    ) -> FrontedServer:
        inner, used = self.inner, model.knobs_for(knobs)
        private = procs.free_port(inner.host)
        argv, uwsgi = nginx.behind(model.command(knobs, inner.host, private), str(sock))
        if uwsgi:  # uWSGI's own protocol on a unix socket, no HTTP router (uWSGI's docs)
            server = self._proc(model.name, argv, server_env(model, knobs, upstream_url))
            address = f"unix:{sock}"
        else:  # HTTP on a private port, ready (answering its health path) before nginx starts
            started = inner.start_server(model, knobs, upstream_url, private)
            server, argv = started.proc, started.argv
            address = procs.bind_address(inner.host, private)
        listen = procs.bind_address(inner.host, port)
        site = nginx.Site(listen, int(used.backlog), address, uwsgi, int(used.keepalive_s))
        (prefix / "nginx.conf").write_text(nginx.config(self.knobs, site, prefix))
        try:
            nginx.check(self.binary, prefix)
            front = self._proc(f"{model.name}-front", nginx.argv(self.binary, prefix), None)
        except BaseException:
            server.stop()
            raise
        url = procs.url(inner.host, port)
        scratch = sock.parent if sock.parent != prefix else None
        workers = self.knobs.workers
        fronted = FrontedServer(model.name, url, argv, server, front, prefix, workers, scratch)
        fronted.private_port = 0 if uwsgi else private
        try:
            procs.wait_http(fronted, fronted.url + inner.ready_path, inner.ready_timeout_s)
        except procs.StartFailed:
            fronted.stop()
            raise
        return fronted

    def _proc(self, name: str, argv: list[str], env: dict[str, str] | None) -> procs.Proc:
        """A process pinned to the server's cores, recorded for `close` and leftover checks."""
        proc = procs.start(
            name,
            argv,
            log_path=self.inner.run_dir / "logs" / f"{name}.log",
            env=env,
            cwd=CODE_ROOT,
            cpus=self.inner.layout.server,
            pid_dir=self.inner.run_dir / "pids",
        )
        self.inner.started.append(proc)
        return proc
