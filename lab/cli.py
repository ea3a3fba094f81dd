"""The `lab` command: run sweeps, list models, report on results."""

from __future__ import annotations

import sys
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from lab.backend import CpuLayout, NativeBackend
from lab.errors import LabError
from lab.models import load_registry
from lab.progress import ConsoleProgress
from lab.scenario import builtin_names, load_scenario, override
from lab.sweep import Sweep, plan_run

console = Console(stderr=True)


def int_list(_: object, param: click.Parameter, value: str | None) -> tuple[int, ...] | None:
    if value is None:
        return None
    try:
        levels = tuple(int(v) for v in value.split(",") if v.strip())
    except ValueError:
        raise click.BadParameter(f"expected whole numbers separated by commas, got {value!r}")
    if not levels or any(v <= 0 for v in levels):
        raise click.BadParameter(f"every value must be a positive whole number, got {value!r}")
    return levels


def name_list(_: object, __: click.Parameter, value: str | None) -> tuple[str, ...] | None:
    return None if value is None else tuple(v.strip() for v in value.split(",") if v.strip())


def knob_pairs(_: object, __: click.Parameter, value: tuple[str, ...]) -> dict[str, int | str]:
    knobs: dict[str, int | str] = {}
    for pair in value:
        key, sep, raw = pair.partition("=")
        if not sep:
            raise click.BadParameter(f"expected NAME=VALUE, got {pair!r}")
        knobs[key.strip()] = raw.strip() if raw.strip() == "auto" else _int(raw, pair)
    return knobs


def _int(raw: str, pair: str) -> int:
    try:
        return int(raw)
    except ValueError:
        raise click.BadParameter(f"knob values are whole numbers or auto, got {pair!r}") from None


def positive(_: object, param: click.Parameter, value: float | None) -> float | None:
    if value is not None and value <= 0:
        raise click.BadParameter(f"must be positive, got {value}")
    return value


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="concurrency-lab")
def main() -> None:
    """concurrency-lab: which Python server concurrency model should serve an I/O-bound Flask app?

    Start with `lab run` (the quick scenario, about 4 minutes), then `lab report results/<run>`.
    """


@main.command()
@click.option("--scenario", "scenario_name", default="quick", show_default=True,
              help=f"Built-in scenario ({', '.join(builtin_names())}) or path to a TOML file.")
@click.option("--models", callback=name_list, help="Comma-separated models (see `lab models`).")
@click.option("--levels", callback=int_list, help="Comma-separated concurrency levels, e.g. 1,10,100.")
@click.option("--duration", type=float, callback=positive, help="Seconds measured per level.")
@click.option("--warmup", type=float, help="Seconds of discarded warm-up per model (0 = none).")
@click.option("--trials", type=int, callback=positive, help="Repeats of every level.")
@click.option("--delay-ms", type=float, help="Mean upstream delay in milliseconds.")
@click.option("--route", type=click.Choice(["io", "sleep", "cpu"]), help="What each request does.")
@click.option("--knob", "knobs", multiple=True, callback=knob_pairs, metavar="NAME=VALUE",
              help="Override a server knob for this run (repeatable), e.g. --knob workers=50.")
@click.option("--port", type=int, help="Server port (default: any free port).")
@click.option("--upstream-port", type=int, help="Upstream port (default: any free port).")
@click.option("--no-pin", is_flag=True, help="Do not pin server and load generator to cores.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("results"),
              show_default=True, help="Directory that receives the run directory.")
@click.option("--models-file", type=click.Path(dir_okay=False, path_type=Path),
              help="A TOML file of extra models (same shape as servers/models.toml).")
def run(scenario_name: str, models: tuple[str, ...] | None, levels: tuple[int, ...] | None,
        duration: float | None, warmup: float | None, trials: int | None, delay_ms: float | None,
        route: str | None, knobs: dict[str, int | str], port: int | None,
        upstream_port: int | None, no_pin: bool, out: Path, models_file: Path | None) -> None:  # fmt: skip
    """Sweep concurrency levels for each model and write results/<run-id>/."""
    registry = load_registry(models_file)
    scenario = override(
        load_scenario(scenario_name), models=models, levels=levels, duration_s=duration,
        warmup_s=warmup, trials=trials, delay_ms=delay_ms, route=route, server_port=port,
        upstream_port=upstream_port, pin_cpus=False if no_pin else None,
    )  # fmt: skip
    chosen = registry.pick(list(scenario.models))
    for model in chosen:
        model.check_installed(registry.knobs.resolve(1))
    scenario.check_open_files()
    plan = plan_run(scenario, chosen, registry.knobs.updated(knobs, "--knob"), out)
    backend = NativeBackend(plan.run_dir, CpuLayout.split(scenario.pin_cpus))
    console.print(f"run [bold]{plan.run_id}[/] → {plan.run_dir}  (about "
                  f"{plan.expected_seconds() / 60:.0f} min)")  # fmt: skip
    try:
        with ConsoleProgress(console, plan.expected_seconds()) as progress:
            Sweep(plan, backend, progress).run()
    except KeyboardInterrupt:
        console.print(f"[red]interrupted[/]: finished steps are kept in {plan.run_dir}")
        sys.exit(130)
    console.print(f"done: {plan.run_dir}  (next: lab report {plan.run_dir})")


@main.command("models")
@click.option("--models-file", type=click.Path(dir_okay=False, path_type=Path))
def list_models(models_file: Path | None) -> None:
    """List the server models, their knobs and exact command lines."""
    registry = load_registry(models_file)
    out = Console()
    table = Table(title="models (baselines dimmed)")
    for column in ("model", "unit", "app", "description"):
        table.add_column(column)
    for m in registry.models.values():
        table.add_row(m.name, m.unit, m.app, m.description, style="dim" if m.baseline else None)
    out.print(table)
    out.print("knob defaults: " + ", ".join(f"{k}={v}" for k, v in vars(registry.knobs).items()))
    out.print("override per run with --knob NAME=VALUE, per scenario in its \\[knobs] table")


def entry() -> None:
    try:
        main(standalone_mode=True)
    except LabError as e:
        console.print(f"[red]error:[/] {e}")
        sys.exit(2)
