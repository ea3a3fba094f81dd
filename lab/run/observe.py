"""What is observed beside the load during a step: the upstream's counters and event-loop lag,
the CPU samplers of the server, the upstream, the generator and the host, and the server's sampled
stacks (`StepProfile`, `lab run --profile`)."""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

import psutil

from lab.backends import dbrun
from lab.backends.base import Backend, Server
from lab.record.rundir import RunDir
from lab.record.stacks import stacks_path
from lab.record.step import Sampled, StepKey, StepRecord, amended
from lab.run.plan import Plan
from lab.run.preflight import Preflight
from lab.system import http_client, profile, tcpconns
from lab.system.sampling import HostMeter, Sampler, TreeMeter
from lab.verdict import owners
from loadgen.protocol import Sample

HEALTH_TIMEOUT_S = 3.0  # a server or upstream silent this long after a step is hung or stalled


class Listener(Protocol):
    """What a sweep reports as it goes (the terminal progress display implements it)."""

    def model_started(self, model: str, trial: int) -> None: ...
    def preflight_done(self, result: Preflight) -> None: ...
    def phase(self, model: str, point: str, phase: str, sample: Sample | None) -> None: ...
    def step_done(self, step: StepRecord) -> None: ...
    def problem(self, model: str, message: str) -> None: ...


class Upstream:
    """The mock upstream of a run: started once, checked and restarted between steps."""

    def __init__(self, plan: Plan, backend: Backend, listener: Listener, port: int) -> None:
        self.plan, self.backend, self.listener, self.port = plan, backend, listener, port
        self.server: Server = backend.start_upstream(plan.scenario.upstream, port)

    @property
    def url(self) -> str:
        return self.server.url

    def ensure(self) -> None:
        """Restart an upstream that died or stalled, on the same port the server calls."""
        if self.problem() is None:
            return
        self.server.stop()
        self.listener.problem("upstream", "upstream down or stalled; restarting it")
        self.server = self.backend.start_upstream(self.plan.scenario.upstream, self.port)

    def problem(self) -> dict[str, Any] | None:
        """Evidence that the upstream exited or stopped answering /stats, or None if it is fine."""
        if not self.server.alive():
            return {"problem": "exited", **self.server.evidence()}
        try:
            http_client.get(self.url, "/stats", timeout_s=HEALTH_TIMEOUT_S)
        except OSError as e:
            problem = f"no answer to /stats within {HEALTH_TIMEOUT_S:.0f} s ({e})"
            return {"problem": problem, **self.server.evidence()}
        return None

    def reset(self) -> None:
        """Start the in-flight high-water mark at the measured window."""
        with contextlib.suppress(OSError):  # a dead upstream is recorded after the step
            http_client.get(self.url, "/stats/reset", HEALTH_TIMEOUT_S, method="POST")

    def window(self) -> UpstreamWindow:
        """What the upstream saw since `reset`: its in-flight high-water mark, how late its
        event loop woke and how many requests it answered (unknown: -1)."""
        try:
            _, raw, _ = http_client.get(self.url, "/stats", timeout_s=HEALTH_TIMEOUT_S)
            stats = json.loads(raw)
            mean, top = stats.get("loop_lag_mean_ms", -1), stats.get("loop_lag_max_ms", -1)
            served = int(stats.get("served", -1))
            routes = tuple(
                (str(route), int(said["calls"]), float(said["mean_ms"]))
                for route, said in dict(stats.get("routes") or {}).items()
            )
            return UpstreamWindow(
                int(stats["max_inflight"]), float(mean), float(top), served, routes
            )
        except (OSError, ValueError, KeyError, TypeError):
            return UpstreamWindow()


@dataclass(frozen=True)
class UpstreamWindow:
    max_inflight: int = -1
    lag_ms: float = -1.0  # mean lateness of its event loop's 10 ms ticks
    lag_max_ms: float = -1.0
    served: int = -1  # requests it answered in the window (-1: unknown)
    routes: tuple[tuple[str, int, float], ...] = ()  # (METHOD /path, calls, mean wait in ms)

    def calls(self, requests: int) -> dict[str, dict[str, float]]:
        """Each route's calls, calls per request of the step and mean wait: "the upstream is
        slow" (mean_ms) told apart from "the app calls it three times" (per_request)."""
        if requests <= 0:
            return {}
        return {
            route: {"calls": calls, "per_request": round(calls / requests, 3), "mean_ms": ms}
            for route, calls, ms in self.routes
        }


@dataclass
class Samplers:
    """The server's, the upstream's and the host's CPU and memory, once a second; the host's
    per core, so a saturated core of the apparatus and kernel network work are seen; the TCP
    connections to the server's port closed in the window (a connection per request costs the
    generators and the kernel); and each database the lab started for the app (found here, from
    `dbrun.processes`, so no caller can forget it): part of the system under test."""

    server: Sampler
    upstream: Sampler
    host: Sampler
    cores: HostMeter
    conns: tcpconns.ConnectionMeter
    closed: Sampler
    front: Sampler  # nginx in front of the server (no meter: no front)
    # connections nginx closed to an HTTP server behind it: its keepalive pool was full (no
    # meter: no front, or uWSGI's unix socket, one connection per request by design)
    pool: Sampler
    databases: dict[str, Sampler]  # kind -> the lab-started database's process tree

    @classmethod
    def of(
        cls, server: Server, upstream: Server, apparatus_cores: tuple[int, ...], gen_pid: int
    ) -> Samplers:
        upstream_proc = getattr(upstream, "proc", None)
        pids = (gen_pid, *((upstream_proc.pid,) if upstream_proc is not None else ()))
        server_proc = getattr(server, "proc", None)
        cores = HostMeter(apparatus_cores, pids, server_proc.pid if server_proc else 0)
        conns = tcpconns.ConnectionMeter(urlsplit(server.url).port or 0)
        meters = (Sampler(server.meter()), Sampler(upstream.meter()), Sampler(cores))
        front_meter = getattr(server, "front_meter", None)
        front = Sampler(front_meter() if front_meter is not None else None)
        private = getattr(server, "private_port", 0)
        pool = Sampler(tcpconns.ConnectionMeter(private) if private else None)
        dbs = {kind: Sampler(_tree(pid)) for kind, pid in dbrun.processes().items()}
        return cls(*meters, cores, conns, Sampler(conns), front, pool, dbs)

    def each(self) -> tuple[Sampler, ...]:
        mine = (self.server, self.upstream, self.host, self.closed, self.front, self.pool)
        return (*mine, *self.databases.values())

    def start(self) -> None:
        for each in self.each():
            each.start()
        self.cores.clear()
        self.conns.clear()
        if isinstance(self.pool.meter, tcpconns.ConnectionMeter):
            self.pool.meter.clear()

    def sampled(self, upstream: UpstreamWindow, window_s: float | None = None) -> Sampled:
        """What was sampled; `window_s`: the measured window, which bounds the closes counted."""
        closed, time_wait = self.conns.counted(window_s)
        window = self.cores.accounted()
        server_cpu = self.server.mean_cpu()
        # a server in a container is no process of the lab's tree: its own meter counts it
        run_cpu = window.run_pct + (0.0 if self.cores.server else server_cpu)
        return Sampled(
            server_connections=closed,
            server_time_wait=time_wait,
            server_cpu_pct=server_cpu,
            server_rss_mb=self.server.peak_rss(),
            server_pss_mb=self.server.peak_pss(),
            upstream_cpu_pct=self.upstream.mean_cpu(),
            host_cpu_pct=window.host_pct,
            run_cpu_pct=round(run_cpu, 1),
            upstream_max_inflight=upstream.max_inflight,
            upstream_served=upstream.served,
            upstream_lag_ms=upstream.lag_ms,
            upstream_lag_max_ms=upstream.lag_max_ms,
            apparatus_core_pct=_mean(self.cores.apparatus),
            host_softirq_pct=window.softirq_pct,
            apparatus_wait_pct=_mean(self.cores.waited),
            server_wait_pct=_mean(self.cores.server_waited),
            server_cores_busy_pct=_mean(self.cores.server_cores_busy)
            if self.cores.server_cores_busy
            else -1.0,
            others_on_cores=self.cores.others(),
            database_cpu_pct={kind: s.mean_cpu() for kind, s in self.databases.items()},
            **self.front_figures(window_s),
            timeseries={
                "server_cpu_pct": self.server.cpu,
                "server_rss_mb": self.server.rss,
                "server_pss_mb": self.server.pss,
                "upstream_cpu_pct": self.upstream.cpu,
                "host_cpu_pct": self.host.cpu,
                "apparatus_core_pct": list(self.cores.apparatus),
                "host_softirq_pct": list(self.cores.softirq),
                "apparatus_wait_pct": list(self.cores.waited),
                "server_wait_pct": list(self.cores.server_waited),
            },
        )

    def front_figures(self, window_s: float | None) -> dict[str, Any]:
        """nginx's CPU and RSS, apart from the server's, and the connections it closed to an
        HTTP server in the window (none without a front)."""
        if self.front.meter is None:
            return {}
        out = {"front_cpu_pct": self.front.mean_cpu(), "front_rss_mb": self.front.peak_rss()}
        if isinstance(self.pool.meter, tcpconns.ConnectionMeter):
            out["front_server_connections"] = self.pool.meter.counted(window_s)[0]
        return out


def _tree(pid: int) -> TreeMeter | None:
    """A meter of a database's process tree (None: it is gone, and nothing is sampled)."""
    try:
        return TreeMeter(pid)
    except psutil.Error:
        return None


def _mean(xs: list[float]) -> float:
    return round(sum(xs) / len(xs), 1) if xs else 0.0


class StepProfile:
    """The server's stacks through a step's measured window (py-spy on its process tree),
    kept with the step by `lab run --profile`.

    Which steps decide is known only after them (the rule table names the limit, the judge the
    highest fair level), so every measured step of a server the lab started is sampled, at a rate
    whose cost benchmarks/profile_cost.py measures, and what is kept depends on the mode:

    - `auto` (the default): every step keeps its summary in the evidence (owners, top packages,
      blocking calls); the stacks' files stay where the verdict needs the "in what?" (the limit is
      the server's CPU or not found) or a call blocked an event loop, and are removed elsewhere;
    - `all`: every step keeps its files too;
    - `off`: no sampler runs.
    """

    def __init__(self, mode: str, server: Server, run: RunDir, key: StepKey) -> None:
        proc = getattr(server, "proc", None)
        self.mode, self.run_dir = mode, run.path
        self.rel = str(Path(run.hlog_relpath(key)).with_suffix(""))  # beside its histogram
        on = mode != "off" and proc is not None
        self.profiler = profile.Profiler(proc.pid, run.path / self.rel) if proc and on else None
        self.summary: dict[str, Any] = {}

    def start(self) -> None:
        if self.profiler is not None:
            self.profiler.start()

    def stop(self) -> None:
        """Stop the recorders and read their stacks into the summary the record keeps."""
        if self.profiler is None or not (self.profiler.popens or self.profiler.problem):
            return  # the measured window never began
        stacks = self.profiler.stop()
        if stacks is None:
            self.summary = {"problem": self.profiler.problem}
            return
        files = {k: str(stacks_path(Path(self.rel), k)) for k in profile.KINDS}
        self.summary = {
            "tool": "py-spy",
            "rate_hz": stacks.rate_hz,
            "stacks": files,
            **owners.summary(stacks.wall, stacks.busy),
        }

    def evidence(self) -> dict[str, Any]:
        return {"profile": self.summary} if self.summary else {}

    def kept(self, record: StepRecord) -> StepRecord:
        """The record as kept: in `auto`, a step whose stacks nobody reads loses their files."""
        files = self.summary.get("stacks")
        needed = record.evidence.limited_by in owners.DECIDING or bool(self.summary.get("blocking"))
        if self.mode != "auto" or not files or needed:
            return record
        for rel in files.values():
            (self.run_dir / rel).unlink(missing_ok=True)
        said = {k: v for k, v in self.summary.items() if k != "stacks"}
        return amended(record, details={**record.evidence.details, "profile": said})
