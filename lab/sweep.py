"""The run sequence per model: start, wait ready, verify and probe, warm up, measure levels, stop.

Models are interleaved across trials (trial 2 starts with the second model, and so on) so slow
drift on the machine does not favour one model. Each finished step is appended to `steps.jsonl`
and fsynced before the next begins: an interrupted run keeps everything it finished.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from lab import dbrun, preflight, procs, results, safety
from lab.backend import Backend, Server
from lab.manifest import completed_steps, manifest, new_run_dir, resumed_manifest
from lab.models import Knobs, Model
from lab.preflight import Preflight
from lab.results import Step
from lab.sampling import HostMeter, Sampler
from lab.scenario import Point, Scenario
from loadgen.spec import OpenSpec, StepSpec

CLIENT_SATURATED_PCT = 90.0
# What an open-loop step adds to its evidence: the rate achieved, requests sent, dropped and still
# unanswered at the end, and latency from actual send time (what a closed loop would report).
OPEN_LOOP_EVIDENCE = ("achieved_rate_rps", "sent", "dropped", "unfinished", "service_latency_ms")
HOST_BUSY_PCT = 50.0  # CPU used by processes outside the run, in % of one core
WATCHDOG_GRACE_S = 15.0  # beyond settle + duration + request timeout: start-up and shutdown
HEALTH_TIMEOUT_S = 3.0  # a server or upstream silent this long after a step is hung or stalled


class Listener(Protocol):
    """What a sweep reports as it goes (the terminal progress display implements it)."""

    def model_started(self, model: str, trial: int) -> None: ...
    def preflight_done(self, result: Preflight) -> None: ...
    def phase(self, model: str, point: str, phase: str, tick: dict[str, Any]) -> None: ...
    def step_done(self, step: Step) -> None: ...
    def problem(self, model: str, message: str) -> None: ...


@dataclass(frozen=True)
class Plan:
    scenario: Scenario
    models: tuple[Model, ...]
    knobs: Knobs  # resolved
    run_dir: Path
    allow_remote: bool = False  # --allow-remote: load may leave loopback
    limits: dict[str, int] = field(default_factory=dict)  # open files needed and applied
    invocation: dict[str, Any] = field(default_factory=dict)  # the CLI options, for --resume

    @property
    def run_id(self) -> str:
        return self.run_dir.name

    def expected_seconds(self) -> float:
        """A rough duration for the progress bar: start-up, probe, warm-up and every step."""
        s = self.scenario
        per_step = s.settle_s + s.duration_s + 2.0
        per_model = 4.0 + s.probe_delay_ms / 500 + s.warmup_s + s.settle_s + 2.0
        return s.trials * len(self.models) * (per_model + len(s.points()) * per_step)


class Sweep:
    def __init__(self, plan: Plan, backend: Backend, listener: Listener,
                 resume: dict[str, Any] | None = None) -> None:  # fmt: skip
        """`resume`: the recorded manifest of the run directory being continued."""
        self.plan = plan
        self.backend = backend
        self.listener = listener
        self.s = plan.scenario
        fresh = manifest(plan, backend, "running")
        self.manifest = resumed_manifest(resume, fresh) if resume else fresh
        self.steps_path = plan.run_dir / "steps.jsonl"
        self.done = completed_steps(plan.run_dir) if resume else set()
        self.upstream: Server | None = None
        self.upstream_port = 0

    def write_manifest(self, **changes: Any) -> None:
        self.manifest.update(changes)
        results.write_json(self.plan.run_dir / "manifest.json", self.manifest)

    def run(self) -> None:
        self.write_manifest()
        owner = self.plan.run_dir / "pids" / procs.OWNER_PID_FILE
        procs.PidRecord.of("lab", os.getpid(), sys.argv).write(owner)
        try:
            self.upstream_port = self.s.upstream_port or procs.free_port(self.s.host)
            self.start_upstream()
            for trial in range(1, self.s.trials + 1):
                shift = (trial - 1) % len(self.plan.models)
                for model in self.plan.models[shift:] + self.plan.models[:shift]:
                    self.run_model(model, trial)
        except KeyboardInterrupt as e:
            self.finish("interrupted", interrupted_by=str(e) or "SIGINT")
            raise
        except BaseException as e:
            self.finish("failed", error=f"{type(e).__name__}: {e}")
            raise
        finally:
            owner.unlink(missing_ok=True)
        self.finish("complete")

    def finish(self, status: str, **extra: Any) -> None:
        """Stop everything this run started (no second Ctrl-C may cut this short), then record."""
        signals = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
        previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in signals}
        try:
            self.backend.close()
            procs.stop_all()
            now = datetime.now(UTC).isoformat(timespec="seconds")
            self.write_manifest(status=status, finished_at=now, **extra)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def start_upstream(self) -> None:
        self.upstream = self.backend.start_upstream(self.s.upstream, self.upstream_port)
        self.manifest["upstream_argv"] = self.upstream.argv

    def run_model(self, model: Model, trial: int) -> None:
        assert self.upstream is not None
        mode = self.s.mode
        points = [p for p in self.s.points()
                  if (model.name, mode, p.users, p.rate_rps, trial) not in self.done]  # fmt: skip
        if not points:
            return
        self.listener.model_started(model.name, trial)
        port = self.s.server_port or procs.free_port(self.s.host)
        try:
            server = self.backend.start_server(model, self.plan.knobs, self.upstream.url, port)
        except procs.StartFailed as e:
            check = Preflight(model.name, ok=False, message=f"start_failed: {e}",
                              verify={"start_failed": e.evidence})  # fmt: skip
            self.record_preflight(check, trial)
            evidence = {"message": str(e), **e.evidence}
            self.record_unmeasured(model, trial, points, "start_failed", evidence)
            return
        try:
            self.measure_model(server, model, trial, points)
        finally:
            server.stop()

    def measure_model(self, server: Server, model: Model, trial: int, points: list[Point]) -> None:
        assert self.upstream is not None
        k = min(self.s.probe_k, model.capacity(self.plan.knobs))
        check = preflight.run(model.name, server.url, self.upstream.url, self.s.path(), k,
                              self.s.probe_delay_ms)  # fmt: skip
        self.record_preflight(check, trial)
        if not check.ok:
            evidence = {"message": check.message, "verify": check.verify, **server.evidence()}
            self.record_unmeasured(model, trial, points, "preflight_failed", evidence)
            return
        if self.s.warmup_s > 0:
            self.load(server, model, self.warmup_point(model, points), trial, warmup=True)
        for point in points:
            step = self.load(server, model, point, trial, warmup=False)
            step.evidence.update(dbrun.pool_evidence(self.s.route, self.plan.knobs, point.users))
            if check.serialized:
                step.flags.insert(0, "serialized")
                step.evidence["serialized"] = check.message
            self.record(step)
            fatal = {"server_died", "server_hung"} & set(step.flags)
            if fatal:
                self.listener.problem(model.name, f"{', '.join(sorted(fatal))}; moving on")
                return

    def warmup_point(self, model: Model, points: list[Point]) -> Point:
        """The heaviest point, but never more users than the model can hold: a warm-up beyond
        capacity only fills the listen queue with requests the first level would then wait
        behind (gunicorn-sync, one request at a time, took 20 s to drain 200 of them)."""
        heaviest = max(points, key=lambda p: p.load)
        if heaviest.rate_rps is not None:
            return heaviest
        return Point(min(heaviest.users, model.capacity(self.plan.knobs)))

    def record(self, step: Step) -> None:
        results.append_jsonl(self.steps_path, step.to_json())
        self.listener.step_done(step)

    def record_unmeasured(self, model: Model, trial: int, points: list[Point], flag: str,
                          evidence: dict[str, Any]) -> None:  # fmt: skip
        """One step per point the model could not be measured at, so every report shows why."""
        now = datetime.now(UTC).isoformat(timespec="milliseconds")
        for point in points:
            self.record(Step(
                run_id=self.plan.run_id, model=model.name, mode=self.s.mode,
                concurrency=point.users, rate_rps=point.rate_rps,
                trial=trial, started_at=now, duration_s=0.0, requests=0, ok=0, errors={},
                throughput_rps=0.0, latency_ms={}, server_cpu_pct=0.0, server_rss_mb=0.0,
                client_cpu_pct=0.0, upstream_max_inflight=0, flags=[flag],
                evidence={flag: evidence},
            ))  # fmt: skip

    def record_preflight(self, check: Preflight, trial: int) -> None:
        row = {**check.to_dict(), "trial": trial}
        results.append_jsonl(self.plan.run_dir / "preflight.jsonl", row)
        self.listener.preflight_done(check)

    def check_targets(self, server: Server) -> None:
        """Refuse to load anything but loopback or the backend's own containers (unless allowed)."""
        assert self.upstream is not None
        trusted = getattr(self.backend, "trusted_hosts", ())
        for what, url in (("server", server.url), ("upstream", self.upstream.url)):
            safety.check_url(url, what, allow_remote=self.plan.allow_remote, trusted=trusted)

    def spec(self, server: Server, point: Point, hlog: str | None, warmup: bool) -> StepSpec:
        """What the load generator is asked to do: users in closed loop, a rate in open loop."""
        s = self.s
        common = dict(
            base_url=server.url, path=s.path(), users=point.users, settle_s=s.settle_s,
            duration_s=s.warmup_s if warmup else s.duration_s, timeout_s=s.request_timeout_s,
            expected_body=preflight.expected_body(s.path()).decode(),
            hlog=None if hlog is None else str(self.plan.run_dir / hlog),
        )  # fmt: skip
        if point.rate_rps is None:
            return StepSpec(**common)
        return OpenSpec(**common, rate_rps=point.rate_rps, arrival=s.arrival)

    def load(self, server: Server, model: Model, point: Point, trial: int, warmup: bool) -> Step:
        """Run one load generator process for one point; return the step it measured."""
        s = self.s
        self.ensure_upstream()
        self.check_targets(server)
        hlog = results.hlog_relpath(model.name, s.mode, point.users, trial, point.rate_rps)
        spec = self.spec(server, point, None if warmup else hlog, warmup)
        generator = "loadgen.worker" if point.rate_rps is None else "loadgen.openloop"
        gen = procs.start(
            "loadgen", [sys.executable, "-m", generator, spec.to_json()],
            log_path=self.plan.run_dir / "logs" / "loadgen.log", cpus=self.backend.loadgen_cpus(),
            pid_dir=self.plan.run_dir / "pids", pipe_stdout=True,
        )  # fmt: skip
        limit_s = spec.settle_s + spec.duration_s + spec.timeout_s + WATCHDOG_GRACE_S
        watchdog = Watchdog(gen, limit_s)
        sampler = Sampler(server.meter())
        upstream_sampler = Sampler(self.upstream.meter() if self.upstream else None)
        host_sampler = Sampler(HostMeter())
        phase = "warmup" if warmup else "settle"
        outcome: dict[str, Any] | None = None
        ticks: list[dict[str, Any]] = []
        started_at = ""
        try:
            assert gen.popen.stdout is not None
            for raw in gen.popen.stdout:
                msg = json.loads(raw)
                if msg["type"] == "measure":
                    phase = "warmup" if warmup else "measure"
                    started_at = msg["started_at"]
                    self.reset_upstream()
                    for each in (sampler, upstream_sampler, host_sampler):
                        each.start()
                elif msg["type"] == "tick":
                    if msg.get("phase") == "measure":
                        ticks.append(msg)
                    self.listener.phase(model.name, point.label, phase, msg)
                elif msg["type"] == "result":
                    outcome = msg
        except KeyboardInterrupt as e:
            if not warmup:  # keep what was measured; --resume measures this step again
                step = self.make_step(model, point, trial, hlog, partial(ticks, started_at),
                                      sampler, server, gen)  # fmt: skip
                step.flags.append("interrupted")
                step.histogram = ""
                step.evidence["interrupted"] = (
                    f"stopped by {e or 'SIGINT'} after {step.duration_s} of {spec.duration_s} s; "
                    "figures from the per-second ticks (no histogram, errors unclassified)"
                )
                self.record(step)
            raise
        finally:
            watchdog.cancel()
            for each in (sampler, upstream_sampler, host_sampler):
                each.stop()
            gen.stop(grace_s=2)
        step = self.make_step(model, point, trial, hlog, outcome, sampler, server, gen)
        if watchdog.fired:
            step.evidence["watchdog"] = f"load generator killed after {limit_s:.0f} s"
        step.upstream_cpu_pct = upstream_sampler.mean_cpu()
        step.host_cpu_pct = host_sampler.mean_cpu()
        step.timeseries.update(upstream_cpu_pct=upstream_sampler.cpu, host_cpu_pct=host_sampler.cpu)
        others = (
            step.host_cpu_pct - step.server_cpu_pct - step.client_cpu_pct - step.upstream_cpu_pct
        )
        if others >= HOST_BUSY_PCT:
            step.flags.append("host_busy")
            step.evidence["host_busy"] = f"other processes used {others:.0f}% of a core"
        return step

    def ensure_upstream(self) -> None:
        """Restart an upstream that died or stalled, on the same port the server calls."""
        if self.upstream is not None and self.upstream_problem() is None:
            return
        if self.upstream is not None:
            self.upstream.stop()
        self.listener.problem("upstream", "upstream down or stalled; restarting it")
        self.start_upstream()

    def upstream_problem(self) -> dict[str, Any] | None:
        """Evidence that the upstream exited or stopped answering /stats, or None if it is fine."""
        assert self.upstream is not None
        if not self.upstream.alive():
            return {"problem": "exited", **self.upstream.evidence()}
        try:
            preflight.get(self.upstream.url, "/stats", timeout_s=HEALTH_TIMEOUT_S)
        except OSError as e:
            return {"problem": f"no answer to /stats within {HEALTH_TIMEOUT_S:.0f} s ({e})",
                    **self.upstream.evidence()}  # fmt: skip
        return None

    def server_hung(self, server: Server, model: Model, point: Point) -> dict[str, Any] | None:
        """Evidence that the server stopped answering, allowing it time to drain its own queue:
        a model holding fewer requests than the step's users still has the rest queued."""
        backlog = max(0, point.users - model.capacity(self.plan.knobs))
        drain_s = backlog / model.capacity(self.plan.knobs) * self.s.delay_ms / 1000
        timeout_s = HEALTH_TIMEOUT_S + drain_s
        try:
            status, _, _ = preflight.get(server.url, "/health", timeout_s=timeout_s)
        except OSError as e:
            return {"problem": f"no answer to /health within {timeout_s:.0f} s ({e})",
                    **server.evidence()}  # fmt: skip
        return None if status == 200 else {"problem": f"/health answered {status}"}

    def reset_upstream(self) -> None:
        """Start the upstream's in-flight high-water mark at the measured window."""
        assert self.upstream is not None
        with contextlib.suppress(OSError):  # a dead upstream is recorded after the step
            preflight.get(self.upstream.url, "/stats/reset", HEALTH_TIMEOUT_S, method="POST")

    def make_step(self, model: Model, point: Point, trial: int, hlog: str,
                  outcome: dict[str, Any] | None, sampler: Sampler, server: Server,
                  gen: procs.Proc) -> Step:  # fmt: skip
        flags: list[str] = []
        evidence: dict[str, Any] = {}
        if outcome is None:
            outcome = {"started_at": datetime.now(UTC).isoformat(), "duration_s": 0.0,
                       "requests": 0, "ok": 0, "errors": {}, "latency_ms": {},
                       "client_cpu_pct": 0.0, "timeseries": {}}  # fmt: skip
            flags.append("loadgen_failed")
            evidence["loadgen"] = gen.evidence()
        upstream_down = self.upstream_problem()
        if not server.alive():
            flags.append("server_died")
            evidence["server"] = server.evidence()
        elif upstream_down is None and (hung := self.server_hung(server, model, point)) is not None:
            flags.append("server_hung")  # (with the upstream down, busy workers are its fault)
            evidence["server"] = hung
        if upstream_down is not None:
            flags.append("upstream_down")
            evidence["upstream"] = upstream_down
        if outcome["client_cpu_pct"] >= CLIENT_SATURATED_PCT:
            flags.append("client_saturated")
            evidence["client_saturated"] = f"load generator CPU {outcome['client_cpu_pct']}%"
        errors = dict(outcome["errors"])
        if outcome.get("dropped"):  # open loop: due while the cap was full, never sent
            errors["dropped"] = outcome["dropped"]
        if point.rate_rps is not None:
            evidence["open_loop"] = {k: outcome.get(k) for k in OPEN_LOOP_EVIDENCE}
        if errors:
            flags.append("errors")
        if not outcome["ok"]:
            flags.append("no_responses")
        duration = outcome["duration_s"]
        series = dict(outcome["timeseries"])
        series.update(server_cpu_pct=sampler.cpu, server_rss_mb=sampler.rss)
        return Step(
            run_id=self.plan.run_id, model=model.name, mode=self.s.mode, concurrency=point.users,
            rate_rps=point.rate_rps, trial=trial, started_at=outcome["started_at"],
            duration_s=duration, requests=outcome["requests"], ok=outcome["ok"], errors=errors,
            throughput_rps=round(outcome["ok"] / duration, 2) if duration else 0.0,
            latency_ms=outcome["latency_ms"], server_cpu_pct=sampler.mean_cpu(),
            server_rss_mb=sampler.peak_rss(), client_cpu_pct=outcome["client_cpu_pct"],
            upstream_max_inflight=-1 if upstream_down else self.upstream_max_inflight(),
            flags=flags, histogram=hlog if outcome["ok"] else "", timeseries=series,
            evidence=evidence,
        )  # fmt: skip

    def upstream_max_inflight(self) -> int:
        assert self.upstream is not None
        try:
            _, raw, _ = preflight.get(self.upstream.url, "/stats", timeout_s=HEALTH_TIMEOUT_S)
            return int(json.loads(raw)["max_inflight"])
        except (OSError, ValueError, KeyError):
            return -1


class Watchdog:
    """Kills a load generator that outlives its step's time limit, so every step ends on time."""

    def __init__(self, gen: procs.Proc, limit_s: float) -> None:
        self.gen = gen
        self.fired = False
        self.timer = threading.Timer(limit_s, self._fire)
        self.timer.daemon = True
        self.timer.start()

    def _fire(self) -> None:
        self.fired = True
        procs.stop_group(self.gen.pid, grace_s=0)

    def cancel(self) -> None:
        self.timer.cancel()


def partial(ticks: list[dict[str, Any]], started_at: str) -> dict[str, Any]:
    """An interrupted step's figures, from the per-second ticks the load generator sent."""
    ok, errors, last = 0.0, 0, 0.0
    for tick in ticks:
        ok += tick["rps"] * (tick["t"] - last)
        errors += tick["errors"]
        last = tick["t"]
    keys = ("t", "rps", "errors", "p50_ms", "p99_ms", "client_cpu_pct")
    cpu = [t["client_cpu_pct"] for t in ticks]
    return {
        "started_at": started_at or datetime.now(UTC).isoformat(), "duration_s": round(last, 3),
        "requests": round(ok) + errors, "ok": round(ok),
        "errors": {"other": errors} if errors else {},
        "latency_ms": {}, "client_cpu_pct": round(sum(cpu) / len(cpu), 1) if cpu else 0.0,
        "timeseries": {k: [t[k] for t in ticks] for k in keys},
    }  # fmt: skip


def plan_run(scenario: Scenario, models: list[Model], knobs: Knobs, out: Path,
             run_dir: Path | None = None, **extra: Any) -> Plan:  # fmt: skip
    """The run's plan; a new run directory under `out` unless an existing `run_dir` is resumed."""
    resolved = knobs.updated(scenario.knobs, f"scenario {scenario.name}: [knobs]")
    return Plan(scenario, tuple(models), resolved.resolve(scenario.max_connections),
                run_dir or new_run_dir(out, scenario.name), **extra)  # fmt: skip
