"""`lab advise`: the search's rules on hand-built steps, then real servers on loopback: a target
two models meet (each recommended configuration re-checked with `lab run`), a target no model
can meet on this machine, and a model whose knob limits cannot reach the target.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from lab.advise.advice import Advice, ModelAdvice
from lab.advise.search import Attempt, Conclusion, Setting, next_move
from lab.advise.target import Slo, confirmed
from lab.config.models import KnobLimit, Model, load_registry
from lab.record.step import Raised, Sampled, StepKey, StepRecord, amended, step_record
from lab.verdict.assess import assessed
from lab.verdict.capacity import Capacity
from lab.verdict.sizing import Bounds, Candidate
from tests.fixture_run import window
from tests.helpers import lab_cli, lab_run, step_rows

REGISTRY = load_registry()
THREADS = REGISTRY.models["uwsgi-threads"]
D_MS = 100.0


def setting(rps: float, p99_ms: float = 250.0, model: Model = THREADS, cores: int = 1) -> Setting:
    return Setting(Slo(rps, p99_ms), D_MS, Bounds.of(model, cores))


def step(
    rate: float,
    rps: float,
    p99: float,
    cpu: float,
    inflight: int,
    pool: int = 45,
    raised: tuple[Raised, ...] = (),
    front_cpu: float = -1.0,
) -> StepRecord:
    """An open-loop step of `pool` threads at `rate` (behind nginx using `front_cpu`, 100 = one
    core, of the server's cores), assessed as the lab assesses one."""
    measured = window(
        rps,
        seconds=5.0,
        latency_ms={"p50": 102.0, "p99": p99, "mean": 104.0},
        open_loop={"scheduled": round(rate * 5), "ok_in_window": round(rps * 5)},
        client_cpu_pct=0.0,
    )
    sampled = Sampled(
        server_cpu_pct=cpu,
        server_rss_mb=70,
        upstream_max_inflight=inflight,
        front_cpu_pct=front_cpu,
    )
    key = StepKey("m", "open", None, rate, 1)
    record = step_record("run", key, measured, sampled, raised, generators=7)
    record = replace(record, max_outstanding=500)
    return assessed(record, Capacity(pool, f"{pool} threads x 1 process", 1.0, D_MS, 24_000, 60))


def test_the_first_candidate_comes_from_littles_law() -> None:
    move = next_move(THREADS, setting(300), [])
    assert isinstance(move, Attempt) and move.role == "confirm" and move.rate == 300
    assert move.candidate == Candidate(1, 45)  # 300 req/s x 100 ms = 30 in flight, +50%
    assert "Little's law" in move.why


def test_a_target_beyond_the_calibration_rate_measures_the_cost_first() -> None:
    move = next_move(THREADS, setting(20_000), [])
    assert isinstance(move, Attempt) and move.role == "calibrate" and move.rate == 500
    costly = step(500, 495, 130, cpu=25, inflight=52, pool=75)  # 0.5 ms per request
    end = next_move(THREADS, setting(20_000), [(move, costly)])
    assert isinstance(end, Conclusion) and not end.meets and end.limited_by == "server_cpu"
    assert "10.1 cores, more than the 1 core" in end.reason
    cheap = next_move(THREADS, setting(1_200), [(move, costly)])
    assert isinstance(cheap, Attempt) and cheap.role == "confirm" and cheap.rate == 1_200
    assert cheap.candidate.processes == 1  # 0.61 cores: one core is enough


def test_behind_nginx_the_cost_per_request_counts_the_fronts_cpu_too() -> None:
    """nginx runs on the server's cores: sizing projects from the CPU both spend per request."""
    move = next_move(THREADS, setting(20_000), [])
    assert isinstance(move, Attempt)
    fronted = step(500, 495, 130, cpu=25, inflight=52, pool=75, front_cpu=25)
    assert fronted.resources.deployed_cpu_ms_per_req == pytest.approx(1.01, abs=0.01)
    end = next_move(THREADS, setting(20_000), [(move, fronted)])
    assert isinstance(end, Conclusion) and "20.2 cores" in end.reason
    assert "server and nginx CPU 50% of a core" in end.reason


def test_knob_limits_that_cannot_hold_the_target_conclude_without_a_step() -> None:
    capped = replace(THREADS, limits=(KnobLimit("concurrency", max=4, why="a pool of 4"),))
    end = next_move(capped, setting(300, model=capped), [])
    assert isinstance(end, Conclusion) and not end.meets and end.limited_by == "concurrency_cap"
    assert "at most 4 requests at once" in end.reason and "a pool of 4" in end.reason
    assert Bounds.of(REGISTRY.models["uwsgi-gevent"], 1).workers[0] == 2  # its minimum holds
    floor = next_move(THREADS, setting(300, p99_ms=D_MS), [])
    assert isinstance(floor, Conclusion) and "waits at least the service time" in floor.reason


def test_a_miss_is_answered_by_the_resource_that_ran_out() -> None:
    first = next_move(THREADS, setting(300), [])
    assert isinstance(first, Attempt)
    full = step(300, 250, 900, cpu=20, inflight=45)
    bigger = next_move(THREADS, setting(300), [(first, full)])
    assert isinstance(bigger, Attempt) and bigger.candidate == Candidate(1, 90)
    busy = step(300, 250, 900, cpu=95, inflight=30)
    end = next_move(THREADS, setting(300), [(first, busy)])
    assert isinstance(end, Conclusion) and "no more cores" in end.reason
    two_cores = next_move(THREADS, setting(300, cores=2), [(first, busy)])
    assert isinstance(two_cores, Attempt) and two_cores.candidate.processes == 2
    met = next_move(THREADS, setting(300), [(first, step(300, 298, 130, cpu=15, inflight=31))])
    assert isinstance(met, Conclusion) and met.meets and "p99 130.0 ms" in met.reason


@pytest.mark.parametrize(
    ("rps", "p99", "meets", "said"),
    [
        (298, 270, True, "p99 270.0 ms (over 250 ms within noise: +8% ["),
        (298, 400, False, "p99 400 ms > 250 ms (+60% ["),
        (250, 130, False, "throughput 250 req/s short of 300 beyond noise (-17% ["),
        (285, 130, True, "p99 130.0 ms, 0 errors, 285.0 of 300 req/s answered"),
    ],
    ids=["p99-over-within-noise", "p99-over-beyond-noise", "short-beyond-noise", "short-within"],
)
def test_a_step_meets_the_target_unless_a_figure_misses_it_beyond_noise(
    rps: float, p99: float, meets: bool, said: str
) -> None:
    """The one test of difference, the target a figure with no noise of its own
    (docs/statistics.md): a figure within noise of its target on the wrong side is a tie, which
    meets, and says so."""
    slo, measured = Slo(300, 250), step(300, rps, p99, cpu=15, inflight=31)
    missed = slo.misses(measured)
    assert (not missed) == meets
    assert said in ("; ".join(missed) if missed else confirmed(measured, slo))


def test_a_step_whose_tail_a_flag_disowns_meets_nothing() -> None:
    fine = step(300, 298, 130, cpu=15, inflight=31)
    stalled = amended(
        fine, flags=(*fine.evidence.flags, "stalled")
    )  # as the verdict's table raises it
    assert Slo(300, 250).misses(fine) == []
    assert Slo(300, 250).misses(stalled) == ["p99 130 ms, not the server's alone (stalled)"]


def test_a_miss_the_generators_caused_is_not_confirmed_never_a_verdict() -> None:
    """The generators saturated on every core this machine gives them (the advisor measured it
    again with more first): the search says what they reached, and concludes nothing on the
    model, whether its figures missed or met the target (a step whose generator was saturated
    but whose figures meet it anyway confirms: the server met it despite the lab)."""
    first = next_move(THREADS, setting(400), [])
    saturated = (Raised("client_saturated", {"client_cpu_pct": 690.0, "generators": 7}),)
    slow = step(400, 303, 431, cpu=30, inflight=40, raised=saturated)
    end = next_move(THREADS, setting(400), [(first, slow)])
    assert isinstance(end, Conclusion) and not end.meets and end.limited_by == "apparatus"
    assert end.reason.startswith("not confirmed on this machine: the lab's generators reached ")
    assert "303 req/s on 7 generator processes" in end.reason and "p99 431 ms" in end.reason
    busy = (Raised("apparatus_saturated", {"core_busy_pct": 97.0}),)  # excludes the step
    fine = step(300, 299, 130, cpu=15, inflight=31, raised=busy)
    first = next_move(THREADS, setting(300), [])
    end = next_move(THREADS, setting(300), [(first, fine)])
    assert isinstance(end, Conclusion) and not end.meets and "the figures meet it" in end.reason


def test_no_verdict_when_the_apparatus_held_a_model_back() -> None:
    slo = Slo(8000, 250)
    held = replace(advice("a", False, 1, 70), limited_by="apparatus")
    missed = advice("b", False, 1, 70)
    found = Advice(slo, (held, missed), "run", True)
    assert found.exit_code() == 4 and found.recommended() == ()
    assert found.sentence().startswith("not confirmed on this machine: the lab's generators")
    assert "no model meets" not in found.sentence()
    assert Advice(slo, (missed,), "run", True).exit_code() == 1
    assert Advice(slo, (advice("c", True, 1, 70), held), "run", True).exit_code() == 0


def advice(model: str, meets: bool, cores: int, rss: float, app: str = "as is") -> ModelAdvice:
    return ModelAdvice(model, meets, {}, "", "", cores, 10, rss, None, "none", "", "", "", 1, app)


def test_the_cheapest_is_recommended_and_ties_are_called_ties() -> None:
    slo = Slo(300, 250)
    models = (advice("a", True, 1, 70), advice("b", True, 1, 71), advice("c", True, 2, 40))
    found = Advice(slo, (*models, advice("d", False, 1, 30)), "run", True)
    assert found.recommended() == ("a", "b")  # 1.4% more PSS: no difference without interval
    assert "tied with b (as many cores, no measurable difference in PSS)" in found.sentence()
    alone = Advice(slo, (advice("a", True, 1, 70), advice("b", True, 1, 75)), "run", True)
    assert alone.recommended() == ("a",)  # 7% more: apart
    assert Advice(slo, (advice("d", False, 1, 30),), "run", True).recommended() == ()


@pytest.mark.parametrize(
    ("models", "recommended", "ported", "said"),
    [
        (
            (advice("uvicorn", True, 1, 55, "async port"), advice("uwsgi", True, 1, 69)),
            ("uwsgi",),
            ("uvicorn",),
            "recommended for your app as it is: uwsgi (1 core, 69 MB PSS); if you port it to async "
            "(ASGI): uvicorn (1 core, 55 MB PSS)",
        ),
        (
            (advice("uvicorn", True, 1, 55, "async port"), advice("uwsgi", False, 1, 69)),
            (),
            ("uvicorn",),
            "no model that runs your app as it is meets the target; if you port it to async "
            "(ASGI): uvicorn (1 core, 55 MB PSS)",
        ),
        (
            (advice("bridge", True, 1, 60, "bridged"), advice("uwsgi", True, 2, 69)),
            ("bridge",),
            (),
            "recommended for your app as it is: bridge through a bridge (1 core, 60 MB PSS)",
        ),
    ],
    ids=["port-is-cheaper-but-beside", "only-the-port-meets", "a-bridge-runs-it-unchanged"],
)
def test_the_recommendation_runs_the_app_as_it_is_and_the_port_stands_beside_it(
    models: tuple[ModelAdvice, ...],
    recommended: tuple[str, ...],
    ported: tuple[str, ...],
    said: str,
) -> None:
    found = Advice(Slo(300, 250), models, "run", True)
    assert found.recommended() == recommended and found.if_ported() == ported
    assert found.sentence() == said and found.meets()
    assert found.to_json()["if_ported"] == (ported[0] if ported else None)


def met(advised: dict[str, Any]) -> bool:
    """Met, or not confirmed only because the apparatus's core was saturated while the step's
    figures met the target: on a shared machine other work can fill that core (`undisturbed`)."""
    disturbed = "not confirmed on this machine" in advised["reason"]
    disturbed = disturbed and "the figures meet it" in advised["reason"]
    return bool(advised["meets"]) or (advised["limited_by"] == "apparatus" and disturbed)


def advise(out: Path, *args: str, timeout_s: float = 300) -> tuple[int, dict[str, Any], str]:
    """`lab advise ARGS --json --out OUT`: exit code, the advice object, what it said."""
    done = subprocess.run(
        lab_cli("advise", *args, "--json", "--out", str(out)),
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    assert done.returncode in (0, 1, 4), done.stderr
    return done.returncode, json.loads(done.stdout), done.stderr


SHORT = ("--duration", "2", "--warmup", "0", "--delay-ms", "50")


def test_a_feasible_target_on_two_models_is_met_and_each_advice_holds(tmp_path: Path) -> None:
    models = "uwsgi-threads,gunicorn-asyncio"
    target = ("--rps", "200", "--p99-ms", "300", "--models", models)
    code, found, said = advise(tmp_path / "advise", *target, *SHORT)
    assert found["slo"] == {"rps": 200.0, "p99_ms": 300.0, "error_rate": 0.0}
    assert [m["model"] for m in found["models"]] == models.split(",")
    assert all(met(m) for m in found["models"]), said
    meeting = [m["model"] for m in found["models"] if m["meets"]]
    as_is = [m["model"] for m in found["models"] if m["meets"] and m["runs_app"] == "as is"]
    assert code in ((0,) if meeting else (1, 4)) and found["recommended"] in (as_is or [None])
    assert found["if_ported"] in ([m for m in meeting if m == "gunicorn-asyncio"] or [None])
    run = Path(found["run_dir"])
    for m in found["models"]:
        assert m["cores"] == 1 and m["pss_mb"] > 0 and m["confirm"]["errors"] == 0
        assert m["confirm"]["p99_ms"] <= 300 and m["confirm"]["rate_rps"] == 200
        assert m["projection"].startswith("projection:")
        assert m["command"].split()[0].endswith(m["model"].split("-")[0])
        recheck(tmp_path / m["model"], m)  # the advice holds outside lab advise
    steps = step_rows(run)
    assert {m["confirm"]["config"] for m in found["models"]} <= {s["model"] for s in steps}
    assert json.loads((run / "advice.json").read_text()) == found
    report = subprocess.run(lab_cli("report", str(run)), capture_output=True, text=True)
    assert report.returncode == 0, report.stderr
    again = subprocess.run(lab_cli("advise", "--resume", str(run)), capture_output=True, text=True)
    assert again.returncode == code, again.stderr  # every step recorded: replayed, none measured
    assert len((run / "steps.jsonl").read_text().splitlines()) == len(steps)


def recheck(out: Path, advised: dict[str, Any]) -> None:
    """The recommended knobs under `lab run`, open loop at the target rate."""
    knobs = advised["knobs"]
    run, _ = lab_run(
        out,
        *("--models", advised["model"], "--mode", "open", "--rates", "200", *SHORT),
        *("--knob", f"processes={knobs['processes']}"),
        *("--knob", f"concurrency={knobs['concurrency']}"),
    )
    (checked,) = step_rows(run)
    assert checked["latency_ms"]["p99"] <= 300, checked["latency_ms"]
    assert checked["throughput_rps"] >= 0.97 * 200 and not checked["errors"], checked


def test_an_impossible_target_exits_1_and_names_the_limit(tmp_path: Path) -> None:
    args = ("--rps", "40000", "--p99-ms", "250", "--models", "gunicorn-asyncio", *SHORT)
    code, found, said = advise(tmp_path, *args)
    assert code == 1, said
    (model,) = found["models"]
    assert not model["meets"] and found["recommended"] is None
    assert model["limited_by"] == "server_cpu", model
    assert "cores, more than the 1 core this server may use" in model["reason"]
    assert model["projection"].startswith("projection: 40,000 req/s needs about")
    assert "no model meets" in said


CAPPED = """
[models.capped-threads]
description = "uWSGI threads behind a pool of 4"
app = "wsgi"
unit = "thread"
requires = ["uwsgi"]
argv = ["{bindir}/uwsgi", "--http-socket", "{bind}", "--module", "{app}", "--master",
        "--processes", "{processes}", "--threads", "{workers}", "--enable-threads"]
# the knob's old name, `workers`, in the placeholder and the limit: still read
[models.capped-threads.knobs]
workers = { max = 4, why = "the app's pool of 4" }
"""


def test_a_model_whose_knob_limits_cannot_reach_the_target(tmp_path: Path) -> None:
    models_file = tmp_path / "capped.toml"
    models_file.write_text(CAPPED)
    args = ("--rps", "300", "--p99-ms", "250", "--models", "capped-threads")
    code, found, _ = advise(tmp_path / "out", *args, "--models-file", str(models_file))
    assert code == 1
    (model,) = found["models"]
    assert model["limited_by"] == "concurrency_cap" and model["confirm"] is None
    assert "at most 4 requests at once" in model["reason"]
    assert "the app's pool of 4" in model["reason"]
    assert "30 in flight" in model["reason"]  # 300 req/s x 100 ms
    assert not (Path(found["run_dir"]) / "steps.jsonl").exists()  # decided without a step


USER_APP = """
import time

from flask import Flask

app = Flask(__name__)


@app.get("/health")
def health() -> str:
    return "ok"


@app.get("/work")
def work() -> str:
    time.sleep(0.05)
    return "done"
"""


def test_the_users_app_is_advised_for_like_the_labs_own(tmp_path: Path) -> None:
    (tmp_path / "users_app.py").write_text(USER_APP)
    app = ("--app", "users_app:app", "--app-dir", str(tmp_path), "--path", "/health")
    target = ("--rps", "100", "--p99-ms", "300", "--models", "uwsgi-threads", "--path", "/work")
    _, found, said = advise(tmp_path / "out", *app, *target, *SHORT[:4])
    (model,) = found["models"]
    assert met(model) and "users_app:app" in model["command"], said
    assert model["knobs"]["concurrency"] == 8  # 100 req/s x the route's ~50 ms, +50%
    assert (Path(found["run_dir"]) / "appcheck.json").exists()


def test_a_mix_is_advised_for_by_its_weighted_service_time(tmp_path: Path) -> None:
    """Half the requests to /health, half to /work: d in Little's law is the mix's (~25 ms),
    so the pool is about half the one /work alone needs, and the target is still met."""
    (tmp_path / "users_app.py").write_text(USER_APP)
    app = ("--app", "users_app:app", "--app-dir", str(tmp_path))
    mix = ("--path", "/health#1", "--path", "/work#1")
    target = ("--rps", "100", "--p99-ms", "300", "--models", "uwsgi-threads")
    _, found, said = advise(tmp_path / "out", *app, *mix, *target, *SHORT[:4])
    (model,) = found["models"]
    assert met(model), said
    assert 2 <= model["knobs"]["concurrency"] <= 5  # 100 req/s x ~25 ms, +50%
    run = Path(found["run_dir"])
    scenario = json.loads((run / "manifest.json").read_text())["scenario"]
    assert 20 <= scenario["delay_ms"] < 40 and len(scenario["app"]["mix"]) == 2
