"""Measuring one step: the load generator, the samplers around it, the checks after it.

A step runs one generator process for one point (users or a rate), samples the server, the
upstream and the whole host once a second during the measured window, writes the per-second
histograms, and afterwards checks for faults (the server died or hung, the upstream went down,
the generator or the host was saturated). What it raises becomes the step's flags, with evidence.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, replace
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from lab.backends.base import Backend, Server
from lab.config.models import Model
from lab.config.scenario import Point, Scenario
from lab.record import login, placeholders
from lab.record.step import Measured, Raised, StepKey, StepRecord, amended, step_record
from lab.run import engine, generators, observe, routestep
from lab.run.apparatus import generator_lag, host_busy, saturated
from lab.run.generator import Generator, Outcome, follow, measured_from
from lab.run.observe import HEALTH_TIMEOUT_S, Listener, Samplers, Upstream, UpstreamWindow
from lab.run.plan import Plan
from lab.system import http_client, outbound, procs, safety
from lab.verdict.assess import assessed
from lab.verdict.capacity import Capacity
from loadgen.protocol import CONNECT_WAIT_S, Sample, Start
from servers.common import expected_body

# {n} (`lab.record.placeholders`): every step's base counts from the lab process's start, so the
# steps of every runner it makes (a sweep's, each of `lab advise`'s candidates) never overlap.
EPOCH = time.time()
WATCHDOG_GRACE_S = 15.0  # beyond settle + duration + request timeout: start-up and shutdown


class StepRunner:
    """Runs steps of one model's server; every step ends on time (a watchdog sees to it)."""

    def __init__(
        self, plan: Plan, backend: Backend, upstream: Upstream, listener: Listener
    ) -> None:
        self.plan, self.backend, self.upstream, self.listener = plan, backend, upstream, listener
        self.s = plan.scenario
        self.idle: tuple[Server, float] | None = None  # a server and its RSS before any load
        self.probe_caps: dict[str, float | None] = {}  # model -> the cap its probe measured

    def capacity(self, server: Server, model: Model) -> Capacity:
        """What the model's knobs allow, and the server's RSS before this runner loaded it."""
        if self.idle is None or self.idle[0] is not server:
            meter = server.meter()
            self.idle = (server, meter.sample().rss_mb if meter is not None else 0.0)
        layout = self.backend.describe().get("cpu_layout") or {}
        given = len(layout.get("server") or ())
        probe_cap = self.probe_caps.get(model.name)
        capacity = Capacity.of(
            model, self.plan.knobs, given, self.s.delay_ms, self.idle[1], probe_cap
        )
        return replace(capacity, front_workers=getattr(server, "front_workers", 0))

    def start_message(self, server: Server, point: Point, warmup: bool) -> Start:
        """What the generator is asked to do: users in closed loop, a rate in open loop."""
        s = self.s
        start = Start(
            base_url=server.url,
            path=s.path(),
            settle_s=s.settle_s,
            duration_s=s.warmup_s if warmup else s.duration_s,
            timeout_s=s.request_timeout_s,
            expected_body=None if s.app else expected_body(s.path()).decode(),
            users=point.users if point.rate_rps is None else 0,
            rate_rps=point.rate_rps,
            max_outstanding=point.users if point.rate_rps is not None else 0,
            arrival=s.arrival,
            generators=self.plan.generators.for_step(point.rate_rps, point.users),
            remote_generators=self.plan.generators.remote,
            master=self.plan.generators.master,
            generator_cpus=generators.worker_cores(self.backend.loadgen_cpus()),
            warmup=warmup,
            **_app_request(s, EPOCH),
        )
        return engine.applied(start, s.engine, self.plan.generators)

    def warm_up(self, server: Server, model: Model, point: Point) -> None:
        """Load the server as a step would, keeping nothing."""
        self.run(server, model, point, trial=0, warmup=True)

    def measure(
        self,
        server: Server,
        model: Model,
        point: Point,
        trial: int,
        known: tuple[Raised, ...],
        context: dict[str, Any] | None = None,
    ) -> StepRecord:
        """One measured step; `known`: flags already raised on the model (e.g. `serialized`);
        `context`: facts for the record's evidence (e.g. a database pool smaller than the users)."""
        record = self.run(server, model, point, trial, warmup=False, known=known, context=context)
        assert record is not None
        return record

    def run(
        self,
        server: Server,
        model: Model,
        point: Point,
        trial: int,
        warmup: bool,
        known: tuple[Raised, ...] = (),
        context: dict[str, Any] | None = None,
    ) -> StepRecord | None:
        self.upstream.ensure()
        self.check_targets(server)
        key = StepKey(model.name, self.s.mode, _users(point), point.rate_rps, trial)
        start = self.start_message(server, point, warmup)
        capacity = self.capacity(server, model)
        front_log = getattr(server, "front_log", None)  # nginx's error log, with a front
        outcome = Outcome()
        profiled = observe.StepProfile(
            "off" if warmup else self.s.profile, server, self.plan.run, key
        )
        with (
            self._generator(start) as (gen, watchdog),
            self._hlog(key, warmup) as hlog,
            self._pools(server) as held,
        ):
            cpus = self.backend.loadgen_cpus()
            samplers = Samplers.of(server, self.upstream.server, cpus, gen.proc.pid)
            try:
                follow(
                    gen,
                    outcome,
                    on_measuring=lambda _: self._measuring(samplers, front_log, profiled),
                    on_sample=lambda m: self._progress(model, point, warmup, m),
                    on_histogram=hlog,
                )
            except KeyboardInterrupt as e:
                if not warmup:  # keep what was measured; --resume measures this step again
                    self._record_partial(key, point, outcome, samplers, str(e) or "SIGINT")
                raise
            finally:
                for each in samplers.each():
                    each.stop()
                profiled.stop()
        if warmup:
            return None
        context = {**(context or {}), "engine": engine.evidence(self.s.engine, start, outcome.done)}
        context |= profiled.evidence()
        raised = [*known, *self._after(server, model, point, outcome, gen, watchdog)]
        if front_log is not None and (said := front_log.since()):
            raised.append(Raised("front_limited", said))
        record = self._record(key, point, outcome, samplers, raised, context, capacity, held)
        return profiled.kept(record)

    def _pools(self, server: Server) -> contextlib.AbstractContextManager[dict[str, int]]:
        """A user's app: the connections its server's processes hold to the lab's PostgreSQL,
        Redis and upstream, read during the step (the app's own pools); nothing otherwise."""
        proc = getattr(server, "proc", None)
        if self.s.app is None or proc is None:
            return contextlib.nullcontext({})
        urls = {
            "postgres": os.environ.get("LAB_DB_URL", ""),
            "redis": os.environ.get("LAB_REDIS_URL", ""),
            "upstream": self.upstream.url,
        }
        ports = {urlsplit(u).port: name for name, u in urls.items() if u and urlsplit(u).port}
        return outbound.holding(proc.pid, {p: n for p, n in ports.items() if p})

    @contextlib.contextmanager
    def _generator(self, start: Start) -> Iterator[tuple[Generator, Watchdog]]:
        gen = Generator(
            start,
            log_path=self.plan.run.logs / "loadgen.log",
            cpus=self.backend.loadgen_cpus(),
            pid_dir=self.plan.run.pids,
        )
        step_s = start.settle_s + start.duration_s + start.timeout_s
        step_s += CONNECT_WAIT_S if start.distributed else 0.0
        step_s += 2 * start.timeout_s if start.login else 0.0  # the login page's GET, the login
        watchdog = Watchdog(gen.proc, step_s + WATCHDOG_GRACE_S)
        try:
            yield gen, watchdog
        finally:
            watchdog.cancel()
            gen.stop()

    @contextlib.contextmanager
    def _hlog(self, key: StepKey, warmup: bool) -> Iterator[Any]:
        if warmup:
            yield None
            return
        with self.plan.run.hlog_writer(key) as writer:
            yield writer.write

    def _measuring(self, samplers: Samplers, front_log: Any, profiled: observe.StepProfile) -> None:
        self.upstream.reset()
        samplers.start()
        profiled.start()
        if front_log is not None:
            front_log.mark()

    def _progress(self, model: Model, point: Point, warmup: bool, sample: Sample) -> None:
        phase = "warmup" if warmup else sample.phase
        self.listener.phase(model.name, point.label, phase, sample)

    def check_targets(self, server: Server) -> None:
        """Refuse to load anything but loopback or the backend's own containers (unless allowed)."""
        trusted = getattr(self.backend, "trusted_hosts", ())
        for what, url in (("server", server.url), ("upstream", self.upstream.url)):
            safety.check_url(url, what, allow_remote=self.plan.allow_remote, trusted=trusted)

    def _after(
        self,
        server: Server,
        model: Model,
        point: Point,
        outcome: Outcome,
        gen: Generator,
        watchdog: Watchdog,
    ) -> list[Raised]:
        """The checks after a step: faults of the server, upstream and generator."""
        raised = list(self.faults(server, model, point, self.upstream.problem()))
        if outcome.done is None:
            evidence = {**gen.proc.evidence(), "message": outcome.failure}
            if watchdog.fired:
                evidence["watchdog"] = f"load generator killed after {watchdog.limit_s:.0f} s"
            raised.append(Raised("loadgen_failed", evidence))
        elif saturated := generators.saturation(outcome.done, gen.start.generator_cpus):
            raised.append(Raised("client_saturated", saturated))
        return raised

    def _record(
        self,
        key: StepKey,
        point: Point,
        outcome: Outcome,
        samplers: Samplers,
        raised: list[Raised],
        context: dict[str, Any] | None,
        capacity: Capacity,
        held: dict[str, int] | None = None,
    ) -> StepRecord:
        measured = measured_from(outcome.done)
        if self.s.app is not None and self.s.app.mix:  # each route's histogram and figures
            hlog = self.plan.run.hlog_relpath(key)
            routes = routestep.kept(self.plan.run.path, hlog, outcome.done, self.s.app.mix)
            measured = replace(measured, routes=routes)
        upstream_down = any(r.flag == "upstream_down" for r in raised)
        window = UpstreamWindow() if upstream_down else self.upstream.window()
        if self.s.app is not None:  # a user's app waits on its own, not on the upstream
            window = replace(window, max_inflight=-1)
        sampled = samplers.sampled(window, measured.duration_s or None)
        raised += host_busy(measured, sampled, _elsewhere_cpu(outcome))
        raised += saturated(measured, sampled, self.s.delay_ms)
        raised += generator_lag(measured)
        logins = login.evidence(outcome.done.login if outcome.done else {})
        if why := login.failures(logins):
            raised.append(Raised("login_failed", why))
        record = step_record(
            self.plan.run_id,
            key,
            measured,
            sampled,
            tuple(raised),
            max_outstanding=point.users if point.rate_rps is not None else None,
            histogram=self.plan.run.hlog_relpath(key),
            context={**(context or {}), **_fleet(outcome), **logins},
            generators=len(outcome.done.parts) if outcome.done and outcome.done.parts else 1,
        )
        calls = window.calls(measured.requests)
        record = amended(record, upstream_calls=calls, app_connections=dict(held or {}))
        return assessed(record, capacity)

    def faults(
        self, server: Server, model: Model, point: Point, upstream_down: dict[str, Any] | None
    ) -> Iterator[Raised]:
        """The server died or hung, or the upstream went down (then busy workers are its fault)."""
        if not server.alive():
            yield Raised("server_died", server.evidence())
        elif upstream_down is None and (hung := self.server_hung(server, model, point)):
            yield Raised("server_hung", hung)
        if upstream_down is not None:
            yield Raised("upstream_down", upstream_down)

    def server_hung(self, server: Server, model: Model, point: Point) -> dict[str, Any] | None:
        """Evidence that the server stopped answering, allowing it time to drain its own queue:
        a model holding fewer requests than the step's users still has the rest queued."""
        capacity = model.capacity(self.plan.knobs)
        backlog = max(0, point.users - capacity)
        timeout_s = HEALTH_TIMEOUT_S + backlog / capacity * self.s.delay_ms / 1000
        path = self.s.health_path
        try:
            status, _, _ = http_client.get(server.url, path, timeout_s=timeout_s)
        except OSError as e:
            problem = f"no answer to {path} within {timeout_s:.0f} s ({e})"
            return {"problem": problem, **server.evidence()}
        return None if http_client.serving(status) else {"problem": f"{path} answered {status}"}

    def _record_partial(
        self, key: StepKey, point: Point, outcome: Outcome, samplers: Samplers, why: str
    ) -> None:
        measured = partial(outcome)
        reason = (
            f"stopped by {why} after {measured.duration_s} of {self.s.duration_s} s; figures from "
            "the per-second samples (no histogram, errors unclassified)"
        )
        record = step_record(
            self.plan.run_id,
            key,
            measured,
            samplers.sampled(UpstreamWindow()),
            (Raised("interrupted", reason),),
            max_outstanding=point.users if point.rate_rps is not None else None,
            status="partial",
        )
        self.plan.run.append_step(record)
        self.listener.step_done(record)


def _users(point: Point) -> int | None:
    return point.users if point.rate_rps is None else None


def _elsewhere_cpu(outcome: Outcome) -> float:
    """The CPU of the step's generators on other machines (named `generator-i@<host>` by the
    master, `loadgen.master`, or `remote-i@<host>` on oha, `loadgen.oha.remote`; oha's processes
    here are `oha-i`), 100 = one core."""
    parts = outcome.done.parts if outcome.done is not None else []
    here = socket.gethostname()
    return sum(p.cpu_pct for p in parts if "@" in p.source and p.source.rsplit("@", 1)[1] != here)


def _fleet(outcome: Outcome) -> dict[str, Any]:
    """Each generator process's share, and the latencies the lab merged from all of them."""
    if outcome.done is None or not outcome.done.parts:
        return {}
    parts = [vars(p) for p in outcome.done.parts]
    return {"generators": {"parts": parts, "merged_latencies": sum(outcome.counted.values())}}


def _app_request(s: Scenario, epoch: float) -> dict[str, Any]:
    """A user's app: the load route's method, body and headers for the generator, the mix, the
    login (each user's, once), and where this step's {n} starts (`placeholders.step_base`:
    above every earlier step's)."""
    if s.app is None:
        return {}
    mix = [asdict(m) for m in s.app.mix]  # a traffic mix: the users draw routes by weight
    base = placeholders.step_base(time.time() - epoch)
    app = s.app
    given = {"method": app.method, "body": app.body, "headers": dict(app.headers)}
    return {**given, "mix": mix, "login": app.login, "n_base": base}


def partial(outcome: Outcome) -> Measured:
    """An interrupted step's figures, from the per-second samples the generator sent."""
    samples = outcome.samples
    ok, errors, last = 0.0, 0, 0.0
    for s in samples:
        ok += s.rps * (s.t - last)
        errors += s.errors
        last = s.t
    cpu = [s.client_cpu_pct for s in samples]
    keys = ("t", "rps", "errors", "p50_ms", "p99_ms", "client_cpu_pct")
    return Measured(
        started_at=outcome.started_at or datetime.now(UTC).isoformat(),
        duration_s=round(last, 3),
        requests=round(ok) + errors,
        ok=round(ok),
        errors={"other": errors} if errors else {},
        client_cpu_pct=round(sum(cpu) / len(cpu), 1) if cpu else 0.0,
        timeseries={k: [getattr(s, k) for s in samples] for k in keys},
    )


class Watchdog:
    """Kills a load generator that outlives its step's time limit, so every step ends on time."""

    def __init__(self, proc: procs.Proc, limit_s: float) -> None:
        self.proc = proc
        self.limit_s = limit_s
        self.fired = False
        self.timer = threading.Timer(self.limit_s, self._fire)
        self.timer.daemon = True
        self.timer.start()

    def _fire(self) -> None:
        self.fired = True
        procs.stop_group(self.proc.pid, grace_s=0)

    def cancel(self) -> None:
        self.timer.cancel()
