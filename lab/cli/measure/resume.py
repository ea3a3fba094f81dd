"""`lab run --resume DIR`: continue a recorded run with the options it was started with."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from lab.cli.common.options import console
from lab.cli.measure.run_options import RESUMABLE
from lab.record.errors import LabError, Refused
from lab.record.rundir import RunDir
from lab.system import procs


def encode_invocation(opts: dict[str, Any], keys: Sequence[str] = RESUMABLE) -> dict[str, Any]:
    encoded: dict[str, Any] = json.loads(json.dumps({k: opts[k] for k in keys}, default=str))
    return encoded


def decode_invocation(recorded: dict[str, Any], keys: Sequence[str] = RESUMABLE) -> dict[str, Any]:
    opts = {k: v for k, v in recorded.items() if k in keys}
    lists = (
        *("models", "levels", "rates", "upstream_routes", "db_urls", "db_setup", "log_methods"),
        "har_keep",
    )
    for key in (*lists, "app_paths", "app_headers", "app_env"):
        if opts.get(key) is not None:
            opts[key] = tuple(opts[key])
    for key in ("models_file", "app_dir", "db_seed", "access_log", "mix_file", "har"):
        if opts.get(key) is not None:
            opts[key] = Path(opts[key])
    return opts


def say_what_is_missing(run: RunDir, complete: bool) -> bool:
    """Compare the recorded steps with the plan, not with a completion marker: say which planned
    steps are missing or unreadable (they are measured again); False when none is."""
    missing = run.missing()
    if complete and not missing:
        console.print(f"{run.path} is already complete; nothing to resume", markup=False)
        return False
    if missing:
        shown = ", ".join(f"{k.model} {k.label} trial {k.trial}" for k in missing[:6])
        more = f" and {len(missing) - 6} more" if len(missing) > 6 else ""
        marked = " (the run was marked complete)" if complete else ""
        console.print(
            f"[yellow]{len(missing)} planned step(s) missing or unreadable{marked}:[/] "
            f"{shown}{more}; measuring them again",
            highlight=False,
        )
    return True


def resumed_run(ctx: click.Context) -> dict[str, Any]:
    """The manifest of the run to resume; exits 0 (after saying so) if it is already complete.

    Options given again on the command line must match the recorded ones; the rest are taken
    from the manifest, so `lab run --resume DIR` alone continues the run as it was started.
    """
    run, manifest = reopened(ctx.params["resume"])
    if not say_what_is_missing(run, manifest.get("status") == "complete"):
        ctx.exit(0)
    same_options(ctx, manifest["invocation"], RESUMABLE)
    return manifest


def reopened(run_dir: Path) -> tuple[RunDir, dict[str, Any]]:
    """A recorded run that can be continued, and its manifest: readable, not running, with the
    invocation that started it (an --app run's app options too: it is checked again before it
    continues); unreadable lines of its records are moved aside first (their steps are then
    missing, and measured again)."""
    try:
        run = RunDir.existing(run_dir)
        manifest = run.manifest()
        run.steps()  # refuse damaged files before anything is appended to them
        run.rows("preflight.jsonl")
    except LabError as e:
        raise LabError(f"--resume: {e}") from None
    if "app" in manifest.get("scenario", {}) and "app_target" not in manifest.get("invocation", {}):
        raise LabError(f"--resume {run_dir}: an --app run of an older lab cannot be resumed")
    owner = procs.PidRecord.read(run_dir / "pids" / procs.OWNER_PID_FILE)
    if owner is not None and owner.is_running():
        raise Refused(f"--resume {run_dir}: a lab process (pid {owner.pid}) is still running it")
    if not isinstance(manifest.get("invocation"), dict):
        raise LabError(f"--resume {run_dir}: its manifest records no invocation to continue")
    warning = run.repair()
    if warning:
        console.print(f"[yellow]warning:[/] {warning}", markup=True, highlight=False)
    return run, manifest


def same_options(ctx: click.Context, recorded: dict[str, Any], keys: Sequence[str]) -> None:
    """Options given again with --resume must be the recorded ones."""
    given = encode_invocation(ctx.params, keys)
    spelled = {p.name: p.opts[0] for p in ctx.command.params if p.opts and p.expose_value}
    conflicts = [
        f"{spelled[key]}: recorded {recorded.get(key)!r}, given {given[key]!r}"
        for key in keys
        if ctx.get_parameter_source(key) == ParameterSource.COMMANDLINE
        and given[key] != recorded.get(key)
    ]
    if conflicts:
        raise LabError(
            f"--resume {ctx.params['resume']}: options differ from the recorded run: "
            f"{'; '.join(conflicts)}. Leave them out to reuse the recorded ones."
        )
