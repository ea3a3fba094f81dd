"""The run sequence, per model: start, wait ready, verify and probe, warm up, measure each level, stop.

Models are interleaved across trials (trial 2 starts with the second model, and so on) so slow
drift on the machine does not favour one model. Each finished step is appended to `steps.jsonl`
and fsynced before the next begins: an interrupted run keeps everything it finished.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import lab
from lab import preflight, procs, results
from lab.backend import Backend, Server
from lab.environment import capture
from lab.models import Knobs, Model
from lab.preflight import Preflight
from lab.results import Step
from lab.sampling import Sampler
from lab.scenario import Scenario
from loadgen.worker import StepSpec

CLIENT_SATURATED_PCT = 90.0
WATCHDOG_GRACE_S = 30.0


class Listener(Protocol):
    """What a sweep reports as it goes (the terminal progress display implements it)."""

    def model_started(self, model: str, trial: int) -> None: ...
    def preflight_done(self, result: Preflight) -> None: ...
    def phase(self, model: str, level: int, phase: str, tick: dict[str, Any]) -> None: ...
    def step_done(self, step: Step) -> None: ...
    def problem(self, model: str, message: str) -> None: ...


@dataclass(frozen=True)
class Plan:
    scenario: Scenario
    models: tuple[Model, ...]
    knobs: Knobs  # resolved
    run_dir: Path

    @property
    def run_id(self) -> str:
        return self.run_dir.name

    def expected_seconds(self) -> float:
        """A rough duration for the progress bar: start-up, probe, warm-up and every step."""
        s = self.scenario
        per_step = s.settle_s + s.duration_s + 2.0
        per_model = 4.0 + s.probe_delay_ms / 500 + s.warmup_s + s.settle_s + 2.0
        return s.trials * len(self.models) * (per_model + len(s.levels) * per_step)


def new_run_dir(out: Path, scenario_name: str) -> Path:
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    run_dir = out / f"{stamp}-{scenario_name}"
    suffix = 1
    while run_dir.exists():
        suffix += 1
        run_dir = out / f"{stamp}-{scenario_name}-{suffix}"
    run_dir.mkdir(parents=True)
    return run_dir


def manifest(plan: Plan, backend: Backend, status: str) -> dict[str, Any]:
    s = plan.scenario
    return {
        "run_id": plan.run_id,
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "status": status,
        "backend": backend.name,
        "execution": backend.describe(),
        "scenario": {
            "name": s.name, "description": s.description, "mode": s.mode,
            "levels": list(s.levels), "duration_s": s.duration_s, "warmup_s": s.warmup_s,
            "settle_s": s.settle_s, "trials": s.trials, "route": s.route, "path": s.path(),
            "delay_ms": s.delay_ms, "distribution": s.upstream.distribution,
            "upstream": vars(s.upstream), "models": [m.name for m in plan.models],
            "request_timeout_s": s.request_timeout_s, "probe_k": s.probe_k,
        },  # fmt: skip
        "knobs": vars(plan.knobs),
        "models": {
            m.name: {
                "description": m.description, "app": m.app, "unit": m.unit,
                "baseline": m.baseline, "capacity": m.capacity(plan.knobs),
                "argv": m.command(plan.knobs, "HOST", 0), "env": dict(m.env),
            }
            for m in plan.models
        },  # fmt: skip
        "environment": capture(),
        "lab_version": lab.__version__,
    }


class Sweep:
    def __init__(self, plan: Plan, backend: Backend, listener: Listener) -> None:
        self.plan = plan
        self.backend = backend
        self.listener = listener
        self.s = plan.scenario
        self.manifest = manifest(plan, backend, "running")
        self.steps_path = plan.run_dir / "steps.jsonl"
        self.upstream: Server | None = None

    def write_manifest(self, **changes: Any) -> None:
        self.manifest.update(changes)
        results.write_json(self.plan.run_dir / "manifest.json", self.manifest)

    def run(self) -> None:
        self.write_manifest()
        try:
            upstream_port = self.s.upstream_port or procs.free_port()
            self.upstream = self.backend.start_upstream(self.s.upstream, upstream_port)
            self.manifest["upstream_argv"] = self.upstream.argv
            for trial in range(1, self.s.trials + 1):
                shift = (trial - 1) % len(self.plan.models)
                for model in self.plan.models[shift:] + self.plan.models[:shift]:
                    self.run_model(model, trial)
        except KeyboardInterrupt:
            self.finish("interrupted")
            raise
        except BaseException:
            self.finish("failed")
            raise
        self.finish("complete")

    def finish(self, status: str) -> None:
        self.backend.close()
        self.write_manifest(status=status, finished_at=datetime.now(UTC).isoformat(timespec="seconds"))

    def run_model(self, model: Model, trial: int) -> None:
        assert self.upstream is not None
        self.listener.model_started(model.name, trial)
        port = self.s.server_port or procs.free_port()
        try:
            server = self.backend.start_server(model, self.plan.knobs, self.upstream.url, port)
        except procs.StartFailed as e:
            check = Preflight(model.name, ok=False, message=f"start_failed: {e}",
                              verify={"start_failed": e.evidence})  # fmt: skip
            self.record_preflight(check, trial)
            return
        try:
            k = min(self.s.probe_k, model.capacity(self.plan.knobs))
            check = preflight.run(model.name, server.url, self.upstream.url, self.s.path(), k,
                                  self.s.probe_delay_ms)  # fmt: skip
            self.record_preflight(check, trial)
            if not check.ok:
                return
            if self.s.warmup_s > 0:
                self.load(server, model, max(self.s.levels), trial, warmup=True)
            for level in self.s.levels:
                step = self.load(server, model, level, trial, warmup=False)
                if check.serialized:
                    step.flags.insert(0, "serialized")
                    step.evidence["serialized"] = check.message
                results.append_jsonl(self.steps_path, step.to_json())
                self.listener.step_done(step)
                if "server_died" in step.flags:
                    self.listener.problem(model.name, "server died; moving to the next model")
                    return
        finally:
            server.stop()

    def record_preflight(self, check: Preflight, trial: int) -> None:
        results.append_jsonl(self.plan.run_dir / "preflight.jsonl", {**check.to_dict(), "trial": trial})
        self.listener.preflight_done(check)

    def load(self, server: Server, model: Model, level: int, trial: int, warmup: bool) -> Step:
        """Run one load generator process for one level; return the step it measured."""
        s = self.s
        hlog = results.hlog_relpath(model.name, s.mode, level, trial)
        spec = StepSpec(
            base_url=server.url, path=s.path(), users=level, settle_s=s.settle_s,
            duration_s=s.warmup_s if warmup else s.duration_s, timeout_s=s.request_timeout_s,
            expected_body=preflight.expected_body(s.path()).decode(),
            hlog=None if warmup else str(self.plan.run_dir / hlog), mode=s.mode,
        )  # fmt: skip
        gen = procs.start(
            "loadgen", [sys.executable, "-m", "loadgen.worker", spec.to_json()],
            log_path=self.plan.run_dir / "logs" / "loadgen.log", cpus=self.backend.loadgen_cpus(),
            pid_dir=self.plan.run_dir / "pids", pipe_stdout=True,
        )  # fmt: skip
        sampler = Sampler(server.meter())
        phase = "warmup" if warmup else "settle"
        outcome: dict[str, Any] | None = None
        try:
            assert gen.popen.stdout is not None
            for raw in gen.popen.stdout:
                msg = json.loads(raw)
                if msg["type"] == "measure":
                    phase = "warmup" if warmup else "measure"
                    self.reset_upstream()
                    sampler.start()
                elif msg["type"] == "tick":
                    self.listener.phase(model.name, level, phase, msg)
                elif msg["type"] == "result":
                    outcome = msg
        finally:
            sampler.stop()
            gen.stop(grace_s=2)
        return self.make_step(model, level, trial, hlog, outcome, sampler, server, gen)

    def reset_upstream(self) -> None:
        """Start the upstream's in-flight high-water mark at the measured window."""
        assert self.upstream is not None
        preflight.get(self.upstream.url, "/stats/reset", timeout_s=5, method="POST")

    def make_step(self, model: Model, level: int, trial: int, hlog: str,
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
        if not server.alive():
            flags.append("server_died")
            evidence["server"] = server.evidence()
        if outcome["client_cpu_pct"] >= CLIENT_SATURATED_PCT:
            flags.append("client_saturated")
            evidence["client_saturated"] = f"load generator CPU {outcome['client_cpu_pct']}%"
        if outcome["errors"]:
            flags.append("errors")
        duration = outcome["duration_s"]
        series = dict(outcome["timeseries"])
        series.update(server_cpu_pct=sampler.cpu, server_rss_mb=sampler.rss)
        return Step(
            run_id=self.plan.run_id, model=model.name, mode=self.s.mode, concurrency=level,
            trial=trial, started_at=outcome["started_at"], duration_s=duration,
            requests=outcome["requests"], ok=outcome["ok"], errors=outcome["errors"],
            throughput_rps=round(outcome["ok"] / duration, 2) if duration else 0.0,
            latency_ms=outcome["latency_ms"], server_cpu_pct=sampler.mean_cpu(),
            server_rss_mb=sampler.peak_rss(), client_cpu_pct=outcome["client_cpu_pct"],
            upstream_max_inflight=self.upstream_max_inflight(), flags=flags,
            histogram=hlog if outcome["ok"] else "", timeseries=series, evidence=evidence,
        )  # fmt: skip

    def upstream_max_inflight(self) -> int:
        assert self.upstream is not None
        try:
            _, raw, _ = preflight.get(self.upstream.url, "/stats", timeout_s=5)
            return int(json.loads(raw)["max_inflight"])
        except (OSError, ValueError, KeyError):
            return -1


def plan_run(scenario: Scenario, models: list[Model], knobs: Knobs, out: Path) -> Plan:
    resolved = knobs.updated(scenario.knobs, f"scenario {scenario.name}: [knobs]")
    return Plan(scenario, tuple(models), resolved.resolve(max(scenario.levels)),
                new_run_dir(out, scenario.name))  # fmt: skip

