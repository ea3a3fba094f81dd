"""What every reproduction shares: a run directory, a published-vs-measured table, clean children.

A reproduction is only worth something if the published figure is printed beside the measured one
and the run can be inspected later, so each experiment returns rows of (published, measured) and
this module writes them into a normal run directory (`manifest.json`, `measurements.jsonl`,
`reproduction.json`) and prints them with rich.

Every benchmark body, and every server it measures, runs in a child process started here: gevent
must monkey-patch before anything else is imported while threads must never be patched, and the
`lab` process itself may have imported locust (which patches on import), so nothing is measured in
the parent.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tomllib
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, is_dataclass
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from types import ModuleType
from typing import Any

from rich.console import Console
from rich.table import Table

from lab import __version__ as LAB_VERSION
from lab.record.rundir import RunDir as LabRunDir
from lab.record.rundir import write_json
from lab.record.step import Measured, Raised, Sampled, StepKey, step_record
from lab.system.environment import capture
from lab.system.procs import Proc, free_port, pinned, spawn, start, stop_group, wait_http
from lab.system.resources import CODE_ROOT, child_env, data_file

__all__ = ["free_port"]  # with `serving`, what an experiment needs to run a server child

KILL_GRACE_S = 3.0  # a child that outlived its timeout gets this long after TERM


Number = float | int


GAP_BAND = (0.5, 2.0)  # measured/published outside this needs an explanation
REPRODUCED_WITHIN = 1.5  # every experiment's "reproduces" band, either way (see `within`)


def within(measured: float, published: float) -> bool:
    """Within the band: a description (a published figure has no spread to test against)."""
    return published > 0 and 1 / REPRODUCED_WITHIN <= measured / published <= REPRODUCED_WITHIN


@dataclass(frozen=True)
class Row:
    """One line of the published-vs-measured table; `published` is None for a measured-only fact.

    A figure far from the published one is only useful with its reason, so a row whose ratio is
    outside GAP_BAND carries an `explanation` drawn from another measured row or from counters,
    and `evidence`: what the measurement ran under and what the kernel counted meanwhile.
    """

    section: str
    metric: str
    unit: str
    published: Number | str | None
    measured: Number | str | None
    note: str = ""
    explanation: str = ""
    evidence: Mapping[str, Any] = field(default_factory=dict)
    # Why the client measured nothing (missing, broken, not one answer); "" when it measured. A
    # failed row has no ratio, is owed, and no conclusion may cite it.
    failed: str = ""

    @classmethod
    def of_failure(cls, section: str, metric: str, unit: str, published: Any, why: str) -> Row:
        return cls(section, metric, unit, published, f"failed: {why}", failed=why)

    def ratio(self) -> float | None:
        """measured / published where both are numbers: 1.0 means the figure reproduced."""
        p, m = self.published, self.measured
        if self.failed:
            return None
        if isinstance(p, int | float) and isinstance(m, int | float) and p:
            return round(m / p, 3)
        return None

    def gap(self) -> bool:
        """The ratio is outside GAP_BAND: the figure did not reproduce within 2x."""
        r = self.ratio()
        return r is not None and not GAP_BAND[0] <= r <= GAP_BAND[1]

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ratio": self.ratio(), "gap": self.gap()}


def unexplained(rows: Sequence[Row]) -> list[str]:
    """What a reproduction still owes: rows with a gap and no explanation, and rows whose client
    failed (measured nothing)."""
    gaps = [f"{r.section}: {r.metric}" for r in rows if r.gap() and not r.explanation]
    return gaps + [f"{r.section}: {r.metric} failed ({r.failed})" for r in rows if r.failed]


def no_answer(result: Mapping[str, Any]) -> str:
    """Why a client's result measured nothing ("" when at least one request was answered): a
    step with no answers is never a time, a ratio or a reproduction."""
    if result.get("failed"):
        return str(result["failed"])
    if result.get("ok", 0) > 0:
        return ""
    why = result.get("ab_aborted") or result.get("error") or ""
    n = result.get("n", result.get("requests", "?"))
    return f"not one request answered (0/{n} ok){': ' + str(why) if why else ''}"


@dataclass(frozen=True)
class Reproduction:
    rows: list[Row]
    conclusion: str
    artifacts: list[str] = field(default_factory=list)  # files in the run dir, e.g. plots
    details: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # title -> table rows


@dataclass
class RunDir:
    """A reproduction's run directory (written by `lab.record.rundir`) and its manifest so far."""

    run: LabRunDir
    manifest: dict[str, Any]

    @property
    def path(self) -> Path:
        return self.run.path

    @property
    def measurements(self) -> Path:
        return self.path / "measurements.jsonl"

    def record(self, obj: dict[str, Any]) -> None:
        self.run.append("measurements.jsonl", obj)

    def save_manifest(self) -> None:
        self.run.write_manifest(self.manifest)

    def ab_step(
        self,
        key: StepKey,
        r: dict[str, Any],
        sampled: Sampled,
        evidence: dict[str, Any],
        histogram: bool = True,
    ) -> None:
        """Record an `experiments.abclient` result as a step: unanswered requests are timeouts.
        `histogram` False: the client wrote no `.hlog` (ApacheBench reports percentiles only)."""
        errors = dict(r["errors"])
        if r["unfinished"]:
            errors["timeout"] = errors.get("timeout", 0) + r["unfinished"]
        started = datetime.fromtimestamp(r["started_at"], UTC).isoformat(timespec="seconds")
        measured = Measured(
            started_at=started,
            duration_s=r["time_taken_s"],
            requests=r["ok"] + sum(errors.values()),
            ok=r["ok"],
            errors=errors,
            latency_ms=r["latency_ms"],
            client_cpu_pct=round(r["client_cpu_pct"], 1),
        )
        cpu = r["client_cpu_pct"]
        raised = (Raised("client_saturated", f"client CPU {cpu:.0f}%"),) if cpu >= 90 else ()
        context = {"deadline_hit": r["deadline_hit"], "ab_style": True, **evidence}
        hlog = LabRunDir.hlog_relpath(key) if histogram else ""
        self.run.append_step(
            step_record(
                self.path.name, key, measured, sampled, raised, histogram=hlog, context=context
            )
        )


@dataclass(frozen=True)
class Experiment:
    """A reproducible experiment: its protocols by size ("default", "quick", maybe "full")."""

    name: str
    summary: str
    protocols: Mapping[str, Any]
    run: Callable[[Any, RunDir], Reproduction]
    models: Mapping[str, str] = field(default_factory=dict)  # name -> description

    @classmethod
    def of_module(cls, module: ModuleType) -> Experiment:
        """The experiment a module defines by its SUMMARY, PROTOCOLS, `run` and MODELS.

        Every reproduction module has these same parts, and its name is its file's stem with
        dashes: `reproduce` maps the name back to that stem to find the published `<stem>.toml`.
        """
        name = module.__name__.rpartition(".")[2].replace("_", "-")
        return cls(name, module.SUMMARY, module.PROTOCOLS, module.run, module.MODELS)


def load_published(stem: str) -> dict[str, Any]:
    """The published figures of one experiment, kept as data in `experiments/<stem>.toml`."""
    with open(data_file("experiments", f"{stem}.toml"), "rb") as f:
        return tomllib.load(f)


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def environment() -> dict[str, Any]:
    """lab's environment record plus what reproductions also depend on: load, Paste's version."""
    env = capture()
    for name in ("paste",):
        try:
            env["packages"][name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            env["packages"][name] = "not installed"
    env["loadavg"] = Path("/proc/loadavg").read_text().strip()
    return env


def make_run_dir(exp: Experiment, size: str, protocol: Any, out: Path) -> RunDir:
    run_dir = LabRunDir.create(out, f"reproduce-{exp.name}-{size}")
    path = run_dir.path
    proto = (
        asdict(protocol)
        if is_dataclass(protocol) and not isinstance(protocol, type)
        else dict(protocol)
    )
    env = environment()
    manifest = {
        "run_id": path.name,
        "lab_version": LAB_VERSION,
        "git_sha": env["git_sha"],
        "created_at": utc_now(),
        "finished_at": None,
        "status": "running",
        "scenario": {
            "name": f"reproduce/{exp.name}",
            "mode": "reproduce",
            "size": size,
            "protocol": proto,
        },
        "models": {name: {"description": d} for name, d in exp.models.items()},
        "environment": env,
        "backend": "native",
    }
    run = RunDir(run_dir, manifest)
    run.save_manifest()
    return run


def reproduce(
    exp: Experiment, size: str, out: Path, protocol: Any = None, console: Console | None = None
) -> Path:
    """Run one experiment into a fresh run directory and print its table; returns the run dir."""
    protocol = protocol if protocol is not None else exp.protocols[size]
    console = console or Console(width=None if sys.stdout.isatty() else 160)
    run = make_run_dir(exp, size, protocol, out)
    console.print(f"[bold]{exp.name}[/] ({size}) -> {run.path}")
    try:
        result = exp.run(protocol, run)
    except KeyboardInterrupt:
        run.manifest.update(status="interrupted", finished_at=utc_now())
        run.save_manifest()
        raise
    except BaseException:
        run.manifest.update(status="failed", finished_at=utc_now())
        run.save_manifest()
        raise
    table = {
        "experiment": exp.name,
        "size": size,
        "machine": "this machine: " + describe_machine(run.manifest["environment"]),
        "published_source": load_published(exp.name.replace("-", "_")).get("source", ""),
        "rows": [r.to_dict() for r in result.rows],
        "unexplained_gaps": unexplained(result.rows),
        "conclusion": result.conclusion,
        "artifacts": result.artifacts,
        "details": result.details,
    }
    failed = [f"{r.section} ({r.failed})" for r in result.rows if r.failed]
    if failed:  # said beside the conclusion, which was drawn without them
        table["conclusion"] += f" Not measured (the client failed; owed): {'; '.join(failed)}."
    write_json(run.path / "reproduction.json", table)
    run.manifest.update(status="complete", finished_at=utc_now())
    run.save_manifest()
    print_table(table, console)
    return run.path


def describe_machine(env: dict[str, Any]) -> str:
    return f"{env['cpus']} CPUs ({env['cpu_model']}), Python {env['python']}, Linux {env['kernel']}"


def fmt(value: Number | str | None) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1e3 else f"{value:,.0f}"  # 43,224 not 4.322e+04
    return str(value)


COLUMNS = ("section", "metric", "unit", "published", "measured", "ratio", "note", "explanation")


def print_table(table: dict[str, Any], console: Console) -> None:
    t = Table(title=f"{table['experiment']}: published vs measured ({table['machine']})")
    for col in COLUMNS:
        t.add_column(col, justify="right" if col in ("published", "measured", "ratio") else "left")
    for r in table["rows"]:
        t.add_row(
            *(
                fmt(r[col]) if col in ("published", "measured", "ratio") else r[col]
                for col in COLUMNS
            )
        )
    console.print(t)
    for gap in table.get("unexplained_gaps", []):
        console.print(f"[bold red]Unexplained gap:[/] {gap} (ratio outside {GAP_BAND})")
    for title, rows in table.get("details", {}).items():
        d = Table(title=title)
        for col in rows[0] if rows else ():
            d.add_column(col, justify="right")
        for r in rows:
            d.add_row(*(fmt(v) for v in r.values()))
        console.print(d)
    console.print(f"[bold]Conclusion:[/] {table['conclusion']}")


def run_child(
    module: str, args: Sequence[str], timeout_s: float, cpus: Sequence[int] | None = None
) -> list[dict[str, Any]]:
    """Run `python -m module args` in its own process group; return its JSON stdout lines.

    The whole group is killed if it outlives `timeout_s`, so a hung benchmark cannot hang the lab.
    `cpus` pins the child (and whatever it starts) to those cores.
    """
    proc = spawn(
        pinned([sys.executable, "-m", module, *args], cpus),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(),
        cwd=CODE_ROOT,
    )
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        stop_child(proc)
        raise TimeoutError(f"{module} {' '.join(args)} exceeded {timeout_s:.0f} s") from None
    stop_child(proc)  # whatever it left in its group, and the watcher's hold on it
    if proc.returncode != 0:
        raise RuntimeError(f"{module} {' '.join(args)} exited {proc.returncode}:\n{err[-2000:]}")
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def stop_child(proc: subprocess.Popen[Any]) -> None:
    """Stop an experiment child and everything it started (its process group)."""
    stop_group(proc.pid, KILL_GRACE_S, wait=proc.wait)


@contextmanager
def serving(
    argv: Sequence[str],
    ready_url: str,
    log: Path,
    cpus: Sequence[int] | None = None,
    env: dict[str, str] | None = None,
    timeout_s: float = 20.0,
) -> Iterator[Proc]:
    """Run a server child until the block ends, used only once `ready_url` answers (bounded,
    so a server that never comes up fails the experiment instead of hanging it). It runs in its
    own process group (a uWSGI master and its workers die together), its output in `log`; `cpus`
    pins it and its children with taskset."""
    proc = start(
        log.stem,
        list(argv),
        log_path=log,
        env={**child_env(), **(env or {})},
        cpus=tuple(cpus or ()),
    )
    try:
        wait_http(proc, ready_url, timeout_s)
        yield proc
    finally:
        proc.stop()


def mean(xs: Sequence[float]) -> float:
    """The repeats' mean: a description, no claim of difference rests on it."""
    return statistics.fmean(xs) if xs else float("nan")


def stdev(xs: Sequence[float]) -> float:  # a description like `mean` (0 for one repeat)
    return statistics.stdev(xs) if len(xs) >= 2 else 0.0
