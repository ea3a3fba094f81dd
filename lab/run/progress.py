"""The live terminal display of a sweep: which model and level, time left, live rps and errors."""

from __future__ import annotations

import time

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

from lab.record.step import StepRecord
from lab.run.preflight import Preflight
from loadgen.protocol import Sample


class ConsoleProgress:
    """A sweep Listener that draws one progress bar and prints a line per finished step."""

    def __init__(self, console: Console, expected_s: float) -> None:
        self.console = console
        self.bar = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            TimeRemainingColumn(),
            TextColumn("{task.fields[live]}"),
            console=console,
            transient=True,
        )
        self.task = self.bar.add_task("starting", total=expected_s, live="")
        self.start = time.monotonic()

    def __enter__(self) -> ConsoleProgress:
        self.bar.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.bar.stop()

    def _advance(self, description: str, live: str = "") -> None:
        elapsed = time.monotonic() - self.start
        total = max(self.bar.tasks[0].total or 0.0, elapsed + 1)
        self.bar.update(
            self.task, description=description, live=live, completed=elapsed, total=total
        )

    def model_started(self, model: str, trial: int) -> None:
        self._advance(f"{model} (trial {trial}): starting and verifying")

    def preflight_done(self, result: Preflight) -> None:
        if not result.ok:
            self.console.print(f"[red]✗ {result.model}: {escape(result.message)}; model skipped")
        elif result.serialized:
            self.console.print(
                f"[bold red]⚠ {result.model} is SERIALIZED: {escape(result.message)}. Its numbers "
                "are not a fair result."
            )
        else:
            overlaps = ", ".join(p.words for p in result.probes)
            self.console.print(
                f"[green]✓ {result.model} verified[/] ({escape(overlaps or result.message)})"
            )

    def phase(self, model: str, point: str, phase: str, sample: Sample | None) -> None:
        if sample is None:
            live = ""
        elif phase == "measure":
            live = (
                f"{sample.rps:>7.0f} rps  {sample.live_errors} errors  client CPU "
                f"{sample.client_cpu_pct:.0f}%"
            )
        else:
            live = f"{sample.live_requests} requests so far"
        self._advance(f"{model} {point} {phase}", live)

    def step_done(self, step: StepRecord) -> None:
        lat = step.latency.latency_ms
        errors = sum(step.load.errors.values())
        colour = "red" if errors or step.evidence.flags else "default"
        flags = f"  [yellow]{', '.join(step.evidence.flags)}" if step.evidence.flags else ""
        point = step.key.label
        # a login step's logins, apart from the mix's figures
        login = step.evidence.details.get("login")
        if login:
            failed = sum(login["errors"].values())
            p50 = login["latency_ms"].get("p50", 0.0)
            flags = f"  logins {login['logins']} ({failed} failed, p50 {p50:.1f} ms){flags}"
        self.console.print(
            f"[{colour}]  {step.model:<18} {point:<13} {step.load.throughput_rps:>8.1f} rps  p50 "
            f"{lat.get('p50', 0):>7.1f} ms  p99 {lat.get('p99', 0):>7.1f} ms  errors {errors}  "
            f"server CPU {step.resources.server_cpu_pct:.0f}%  client CPU "
            f"{step.resources.client_cpu_pct:.0f}%{flags}"
        )

    def problem(self, model: str, message: str) -> None:
        self.console.print(f"[red]✗ {escape(model)}: {escape(message)}")
