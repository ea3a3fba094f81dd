"""The run sequence per model: start, verify and probe, warm up, measure each level, stop.

The models run in a shuffled order in each trial, from a seed kept in the manifest (a resumed run
keeps it), so slow drift on the machine falls on no model in particular. After the trials, the
steps the lab or the machine kept from a result are measured again within a budget
(`lab.run.remeasure`). Each finished step is appended to `steps.jsonl`
and fsynced before the next begins: an interrupted run keeps everything it finished. Every point
of every model gets a record, also when the model could not start or died (status `skipped`).
"""

from __future__ import annotations

import os
import random
import secrets
import signal
import sys
import time
from datetime import UTC, datetime
from typing import Any

from lab.backends import dbrun
from lab.backends.base import Backend, Server
from lab.config.models import Model
from lab.config.scenario import Point
from lab.record.flags import outside
from lab.record.step import Measured, Raised, StepKey, StepRecord, step_record
from lab.run import preflight, remeasure
from lab.run.manifest import manifest, resumed_manifest
from lab.run.observe import Listener, Upstream
from lab.run.plan import Plan
from lab.run.preflight import Preflight
from lab.run.steps import StepRunner
from lab.system import procs
from lab.verdict.capacity import apparatus_rate, asked_rate

FATAL = ("server_died", "server_hung")  # the model's remaining levels are skipped after these


class Sweep:
    def __init__(
        self,
        plan: Plan,
        backend: Backend,
        listener: Listener,
        resume: dict[str, Any] | None = None,
    ) -> None:
        """`resume`: the recorded manifest of the run directory being continued."""
        self.plan, self.backend, self.listener = plan, backend, listener
        self.s = plan.scenario
        self.run_dir = plan.run
        fresh = manifest(plan, backend, "running")
        self.manifest = resumed_manifest(resume, fresh) if resume else fresh
        self.done = self.run_dir.completed() if resume else set()
        self.runner: StepRunner | None = None
        self.snapshot: dict[str, Any] = {}  # the copy of the app's data the model runs on

    def write_manifest(self, **changes: Any) -> None:
        self.manifest.update(changes)
        self.run_dir.write_manifest(self.manifest)

    def run(self) -> None:
        if served := dbrun.describe():  # the databases: durability, the app's snapshot
            self.manifest["databases"] = served
        self.write_manifest()
        owner = self.run_dir.pids / procs.OWNER_PID_FILE
        procs.PidRecord.of("lab", os.getpid(), sys.argv).write(owner)
        try:
            port = self.s.upstream_port or procs.free_port(self.s.host)
            upstream = Upstream(self.plan, self.backend, self.listener, port)
            self.manifest["upstream_argv"] = getattr(upstream.server, "argv", [])
            self.runner = StepRunner(self.plan, self.backend, upstream, self.listener)
            self.measure_all()
        except KeyboardInterrupt as e:
            self.finish("interrupted", interrupted_by=str(e) or "SIGINT")
            raise
        except BaseException as e:
            self.finish("failed", error=f"{type(e).__name__}: {e}")
            raise
        finally:
            owner.unlink(missing_ok=True)
        self.finish("complete")

    def measure_all(self) -> None:
        """Every point of every model, trial after trial, each trial's models in an order drawn
        from the run's seed; then the steps owed a result of their own, measured again
        (`lab advise` plans its own steps)."""
        seed = self.manifest.get("order_seed")
        if not isinstance(seed, int):
            seed = self.s.order_seed if self.s.order_seed >= 0 else secrets.randbelow(2**32)
        rng = random.Random(seed)
        orders = [rng.sample(self.plan.models, len(self.plan.models)) for _ in range(self.s.trials)]
        self.write_manifest(order_seed=seed, order=[[m.name for m in o] for o in orders])
        started = time.monotonic()
        for trial, order in enumerate(orders, start=1):
            for model in order:
                self.run_model(model, trial)
        self.measure_again(remeasure.Budget(self.s.remeasure * (time.monotonic() - started)), rng)

    def measure_again(self, budget: remeasure.Budget, rng: random.Random) -> None:
        """The steps the lab or the machine kept from a result, measured again while the budget
        lasts (at most `remeasure.ROUNDS` more times each); what was measured again, and what
        the budget left owed, in the manifest."""
        models = {m.name: m for m in self.plan.models}
        again: list[str] = []
        for _ in range(remeasure.ROUNDS):
            for o in remeasure.in_order(remeasure.owed_again(self.run_dir.steps()), rng):
                model = models[o.model]
                points = [p for p in self.s.points() if self.key(model, p, o.trial) in o.keys]
                if not points or not budget.fits(self.plan.model_seconds(len(points))):
                    continue
                began = time.monotonic()
                self.run_model(model, o.trial, points)
                budget.spend(time.monotonic() - began)
                again += [f"{o.model} {k.label} trial {o.trial}" for k in o.keys]
        left = remeasure.owed_again(self.run_dir.steps())
        self.write_manifest(
            remeasured={
                "budget_s": round(budget.seconds, 1),
                "spent_s": round(budget.spent, 1),
                "steps": again,
                "still_owed": [
                    f"{o.model} {k.label} trial {o.trial}" for o in left for k in o.keys
                ],
            }
        )

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

    def run_model(self, model: Model, trial: int, again: list[Point] | None = None) -> None:
        """Start the model's server, measure its remaining points (or `again`: points measured
        once already, measured again), stop it."""
        points = again or [p for p in self.s.points() if self.key(model, p, trial) not in self.done]
        if not points:
            return
        self.listener.model_started(model.name, trial)
        port = self.s.server_port or procs.free_port(self.s.host)
        assert self.runner is not None
        self.snapshot = dbrun.fresh_copy(f"{model.name} trial {trial}")
        try:
            server = self.backend.start_server(
                model, self.plan.knobs, self.runner.upstream.url, port
            )
        except procs.StartFailed as e:
            check = Preflight(
                model.name,
                ok=False,
                message=f"start_failed: {e}",
                verify={"start_failed": e.evidence},
            )
            self.record_preflight(check, trial)
            why = Raised("start_failed", {"message": str(e), **e.evidence})
            self.record_skipped(model, trial, points, why)
            return
        try:
            self.measure_model(server, model, trial, points)
        finally:
            server.stop()

    def measure_model(self, server: Server, model: Model, trial: int, points: list[Point]) -> None:
        """Verify and probe, warm up, then measure each point until one is fatal."""
        assert self.runner is not None
        k = min(self.s.probe_k, model.capacity(self.plan.knobs))
        check = self.plan.preflights.get(model.name) or preflight.run(
            model.name,
            server.url,
            self.runner.upstream.url,
            self.s.path(),
            k,
            self.s.probe_delay_ms,
        )
        self.record_preflight(check, trial)
        if not check.ok:
            evidence = {"message": check.message, "verify": check.verify, **server.evidence()}
            self.record_skipped(model, trial, points, Raised("preflight_failed", evidence))
            return
        if self.s.warmup_s > 0:
            self.runner.warm_up(server, model, self.warmup_point(model, points))
        self.runner.probe_caps[model.name] = check.capped_at
        known = (Raised("serialized", check.message),) if check.serialized else ()
        costs: list[StepRecord] = []  # this model's steps the apparatus's cost is read from
        for i, point in enumerate(points):
            self.warn_beyond(model, point, costs)
            pool = dbrun.pool_evidence(self.s.route, self.plan.knobs, point.users)
            context = {**pool, **self.snapshot}
            step = self.runner.measure(server, model, point, trial, known, context)
            self.record(step)
            if step.resources.apparatus_cpu_ms_per_req and not outside(step.evidence.flags):
                costs.append(step)
            fatal = [f for f in FATAL if f in step.evidence.flags]
            if fatal:
                why = f"{', '.join(fatal)} at {point.label}; not measured"
                self.listener.problem(model.name, f"{', '.join(fatal)}; moving on")
                self.record_skipped(model, trial, points[i + 1 :], Raised(fatal[0], why))
                return

    def warn_beyond(self, model: Model, point: Point, below: list[StepRecord]) -> None:
        """Say before a level runs that it is beyond what this machine's apparatus can load for
        this model: the rate it would ask for (`asked_rate`, from the level below) against the
        rate at which the apparatus's cores fill, from its CPU per request at the heaviest level
        so far (`apparatus_rate`: its idle work is spread over the most requests there). It is
        measured, and flagged if the apparatus fills, but the reader knows why beforehand."""
        if self.s.mode != "closed" or not below:
            return
        last = below[-1]
        cost = float(last.resources.apparatus_cpu_ms_per_req or 0.0)
        cores = len(self.backend.loadgen_cpus()) or len(os.sched_getaffinity(0))
        most = apparatus_rate(cost, cores)
        asked = asked_rate(point.users, self.s.delay_ms, last.load.throughput_rps, last.users or 1)
        if asked > most:
            self.listener.problem(
                model.name,
                f"{point.label}: beyond this machine's apparatus for this model (about "
                f"{asked:,.0f} req/s asked, its cores full at about {most:,.0f} req/s: {cost:.2f} "
                f"ms of its CPU per request on {cores} core(s)); measured, flagged if the "
                "apparatus fills",
            )

    def warmup_point(self, model: Model, points: list[Point]) -> Point:
        """The heaviest point, but never more users than the model can hold: a warm-up beyond
        capacity only fills the listen queue with requests the first level would then wait
        behind (gunicorn-sync, one request at a time, took 20 s to drain 200 of them)."""
        heaviest = max(points, key=lambda p: p.load)
        if heaviest.rate_rps is not None:
            return heaviest
        return Point(min(heaviest.users, model.capacity(self.plan.knobs)))

    def key(self, model: Model, point: Point, trial: int) -> StepKey:
        users = point.users if point.rate_rps is None else None
        return StepKey(model.name, self.s.mode, users, point.rate_rps, trial)

    def record(self, step: StepRecord) -> None:
        self.run_dir.append_step(step)
        self.listener.step_done(step)

    def record_skipped(self, model: Model, trial: int, points: list[Point], why: Raised) -> None:
        """One record per point the model could not be measured at, so every report shows why."""
        now = datetime.now(UTC).isoformat(timespec="milliseconds")
        for point in points:
            cap = point.users if point.rate_rps is not None else None
            self.record(
                step_record(
                    self.plan.run_id,
                    self.key(model, point, trial),
                    Measured(started_at=now),
                    raised=(why,),
                    max_outstanding=cap,
                    status="skipped",
                )
            )

    def record_preflight(self, check: Preflight, trial: int) -> None:
        self.run_dir.append("preflight.jsonl", {**check.to_dict(), "trial": trial})
        self.listener.preflight_done(check)
