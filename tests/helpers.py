"""What tests share: the lab's CLI in a subprocess and its run directory, waiting for a server to
answer, a quiet handler for the tests' own HTTP servers, a striker thread beside a run, a docs
table checked against its renderer, and hand-built step records. Test modules import these from
here, never from another test module (or conftest.py, which holds only the fixtures and the
tiers' hooks)."""

from __future__ import annotations

import contextlib
import json
import math
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from analysis.loading import Run, load
from lab.record.errors import EXIT_USAGE
from lab.record.flags import FLAGS
from lab.record.models import AS_IS, ASYNC_PORT
from lab.record.rundir import RunDir
from lab.record.step import (
    Measured,
    Raised,
    Sampled,
    StepKey,
    StepRecord,
    amended,
    flat,
    step_record,
)
from lab.record.stepjson import from_json
from tests.fixture_run import FixtureStep, build_run

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"  # the tutorial's app and files (docs/tutorial.md)


# A mix file's first route: /health at weight 0, which the app's check asks and the sweep never
# sends (the routes after it carry the traffic).
MIX_HEALTH_ROUTE = """
[[route]]
path = "/health"
weight = 0
"""


def flask_app(body: str) -> str:
    """A Flask app's module source for `lab run --app`: Flask, its `request` and the `app` object,
    then `body` (the module's own imports and its views, written against `app`)."""
    return f"from flask import Flask, request\n\napp = Flask(__name__)\n{body}"


def lab_cli(*args: str) -> list[str]:
    """argv running the `lab` CLI in a subprocess with this interpreter."""
    return [sys.executable, "-c", "from lab.cli.main import entry; entry()", *args]


def lab_run(
    out: Path, *args: str, timeout_s: float = 240
) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """`lab run ARGS --out OUT` in a subprocess that must succeed; its run directory and result."""
    done = subprocess.run(
        lab_cli("run", *args, "--out", str(out)), capture_output=True, text=True, timeout=timeout_s
    )
    assert done.returncode == 0, done.stderr
    (run,) = [p for p in out.iterdir() if p.is_dir()]
    return run, done


def module_run(*args: str) -> Any:
    """A module-scoped `run_dir` fixture: one `lab run ARGS` whose run directory every test of the
    module reads (a sweep costs seconds; reading it costs nothing)."""

    @pytest.fixture(scope="module")
    def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
        run, _ = lab_run(tmp_path_factory.mktemp("results"), *args)
        return run

    return run_dir


def wait_answer(url: str, proc: subprocess.Popen[bytes], timeout_s: float = 30) -> None:
    """Until `url` answers, failing at once if the process that should serve it exits."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"{proc.args!r} exited with {proc.returncode}"
        try:
            with urllib.request.urlopen(url, timeout=1):
                return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"{url} did not answer within {timeout_s} s")


def step_rows(run_dir: Path) -> list[dict[str, Any]]:
    """A run's steps as the lab reads them back (`lab.record.stepjson`, any schema), each a flat
    row: every figure under its own name beside the key, the flags' details under `details`
    (missing file: none)."""
    path = run_dir / "steps.jsonl"
    if not path.exists():
        return []
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    # through JSON again, so that a row holds what a JSON reader holds (lists, not tuples)
    return [json.loads(json.dumps(flat(from_json(json.loads(line))))) for line in lines]


class QuietHandler(BaseHTTPRequestHandler):
    """A request handler for a test's own HTTP server: `answer` sends a whole body with its
    length, and nothing is logged (http.server's line per request would bury the test's own
    output)."""

    def answer(self, body: bytes, status: int = 200) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: object) -> None:
        pass


@contextlib.contextmanager
def striking(strike: Callable[..., None], *args: object, join_s: float = 10.0) -> Iterator[None]:
    """`strike(*args, done)` in a daemon thread for the block's length (a striker that stops or
    stalls a process of the run the block waits for): `done` is set and the thread joined when
    the block ends, failed or not, so no striker outlives its test."""
    done = threading.Event()
    thread = threading.Thread(target=strike, args=(*args, done), daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join(timeout=join_s)


def assert_page_current(page: Path, begin: str, end: str, body: Callable[[], str]) -> None:
    """The table `page` shows between `begin` and `end` is what `body` renders now; a stale one
    says the command that renders every such table again."""
    from lab.cli.reference import is_current  # the whole CLI: loaded by the tests that need it

    assert is_current(page.read_text(), begin, end, body), "run `python -m lab.cli.reference`"


def undisturbed(step: dict) -> bool:
    """No flag but those other processes on a shared machine can raise: `host_busy`, and
    `apparatus_saturated` when they fill the load generator's core (it then waits for a CPU),
    `lab_limited`, which the verdict's rules raise where those kept the step below ideal, and
    the generator's own lag (a busy machine delays its loop too)."""
    shared = {"host_busy", "apparatus_saturated", "lab_limited", "generator_lag"}
    return set(step["flags"]) <= shared | {"generator_lag_extremes"}


def run_lab(*args: str, cwd=None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(lab_cli(*args), capture_output=True, text=True, timeout=60, cwd=cwd)


def assert_clean_error(
    done: subprocess.CompletedProcess[str], *needles: str, code: int = EXIT_USAGE
) -> None:
    output = done.stdout + done.stderr
    assert done.returncode == code, output
    assert "Traceback" not in output
    for needle in needles:
        assert needle in output, output


def record(
    model: str,
    rps: float,
    *,
    users: int = 10,
    trial: int = 1,
    p99: float = 100.0,
    flags: tuple[str, ...] = (),
    seconds: tuple[float, ...] = (),
) -> StepRecord:
    """A 10 s step at `rps` ok/s; `seconds` is its per-second throughput (default: flat)."""
    per_second = list(seconds or (rps,) * 10)
    measured = Measured(
        started_at="2026-01-01T00:00:00+00:00",
        duration_s=10.0,
        requests=round(rps * 10),
        ok=round(rps * 10),
        latency_ms={"p50": p99 / 2, "p99": p99},
        timeseries={"rps": per_second},
    )
    raised = tuple(Raised(f, "test") for f in flags)
    key = StepKey(model, "closed", users, None, trial)
    return step_record("run", key, measured, Sampled(), raised)


# Generated sweeps (Hypothesis) and the reference the claims are held against: what a point's
# figures and fairness are, by plain arithmetic over its trials and the flag registry's own
# declarations (never the code under test).

FLAG_NAMES = sorted(FLAGS)


MODELS = ("a", "b", "c", "d")


SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


LIMITS = ("", "none", "server_cpu", "unknown", "apparatus")
CLASSES = {"a": AS_IS, "b": AS_IS, "c": ASYNC_PORT, "d": ASYNC_PORT}


@st.composite
def point(draw: st.DrawFn, model: str = "a", users: int = 10) -> list[StepRecord]:
    """One point: a model's 1-4 trials at one level, each with its own flags (any trial may
    carry any), its own `limited_by`, and failures (fewer answers than requests)."""
    rps = st.floats(0.5, 3000.0, allow_nan=False)
    p99 = st.floats(1.0, 5000.0, allow_nan=False)
    n = draw(st.integers(1, 4))
    out = []
    for t in range(1, n + 1):
        flags = tuple(draw(st.lists(st.sampled_from(FLAG_NAMES), max_size=2, unique=True)))
        r = record(
            model,
            draw(rps),
            users=users,
            trial=t,
            p99=draw(p99),
            flags=flags,
            seconds=tuple(draw(st.lists(rps, min_size=0, max_size=4))),
        )
        failed = draw(st.sampled_from((0.0, 0.0, 0.01, 0.5, 0.95)))
        limit = draw(st.sampled_from(LIMITS))
        why = f"below the ideal, trial {t}" if limit == "unknown" else ""
        out.append(
            amended(r, ok=round(r.load.requests * (1 - failed)), limited_by=limit, limit_reason=why)
        )
    return out


@st.composite
def sweep(draw: st.DrawFn) -> list[StepRecord]:
    """A sweep: two to four models at one to three levels, some points missing (a model not
    measured at a level)."""
    models = draw(st.lists(st.sampled_from(MODELS), min_size=2, max_size=4, unique=True))
    levels = draw(st.lists(st.sampled_from((1, 10, 100)), min_size=1, max_size=3, unique=True))
    missing = draw(st.sets(st.tuples(st.sampled_from(models), st.sampled_from(levels))))
    return [r for m in models for u in levels if (m, u) not in missing for r in draw(point(m, u))]


def ref_fair(rs: list[StepRecord]) -> bool:
    return not any(FLAGS[f].excludes for r in rs for f in r.evidence.flags if f in FLAGS)


def ref_tail_fair(rs: list[StepRecord]) -> bool:
    """Its p99 may be compared: no flag excludes it or its tail, 10+ requests beyond p99 in
    every trial."""
    flagged = any(
        FLAGS[f].excludes or FLAGS[f].tail for r in rs for f in r.evidence.flags if f in FLAGS
    )
    return not flagged and all(r.load.ok >= 1000 for r in rs)


def ref_mean(rs: list[StepRecord], metric: str) -> float:
    if metric == "rps":
        xs = [r.load.throughput_rps for r in rs]
    else:
        xs = [r.latency.latency_ms["p99"] for r in rs if r.load.ok > 0]
    return math.fsum(xs) / len(xs) if xs else math.nan


def ref_points(records: list[StepRecord]) -> dict[tuple[str, int], list[StepRecord]]:
    out: dict[tuple[str, int], list[StepRecord]] = {}
    for r in records:
        out.setdefault((r.model, r.users or 0), []).append(r)
    return out


def ref_best(records: list[StepRecord], models: set[str], users: int) -> str | None:
    """The fair model with the highest mean throughput at `users` (by name among equals)."""
    fair = [
        (-ref_mean(rs, "rps"), m)
        for (m, u), rs in ref_points(records).items()
        if u == users and m in models and ref_fair(rs) and ref_mean(rs, "rps") > 0
    ]
    return min(fair)[1] if fair else None


def two_models(run_dir: Path, preflight: dict | None = None, b_flags: tuple[str, ...] = ()) -> Path:
    """a leads at c=1, b overtakes at c=10 on throughput and on p99; b is client-saturated there."""
    spec = {  # model -> [(concurrency, rps, latency ms)]
        "a": [(1, 10.0, 100.0), (10, 90.0, 110.0), (100, 300.0, 300.0)],
        "b": [(1, 9.0, 105.0), (10, 98.0, 95.0), (100, 600.0, 180.0)],
    }
    steps = [
        FixtureStep(
            model,
            conc,
            trial,
            (rps,) * 3,
            (lat,),
            flags=(("client_saturated",) if (model, conc) == ("b", 10) else ())
            + (b_flags if model == "b" else ()),
        )
        for model, points in spec.items()
        for conc, rps, lat in points
        for trial in (1, 2)
    ]
    return build_run(run_dir, steps, preflight=preflight)


def run_of(records: list[StepRecord], run_dir: Path) -> Run:
    """Generated steps as a run directory, read back the way `lab report` reads one."""
    run_dir.mkdir(parents=True)
    out = RunDir(run_dir)
    models = sorted({r.model for r in records})
    out.write_manifest(
        {"run_id": "generated", "status": "complete", "scenario": {"delay_ms": 100.0}}
        | {"models": {m: {} for m in models}}
    )
    for r in records:
        out.append_step(r)
    return load(run_dir)
