"""The Flask user's answer: per model, whether it runs the app as it is (WSGI), through a bridge,
or needs an async port (ASGI); the recommendation is the best that runs it unchanged, with the
best async port beside it and what each bridged configuration costs."""

from __future__ import annotations

from pathlib import Path

import pytest

from analysis.interfaces import answer, run_answer
from analysis.loading import load
from analysis.points import build
from lab.config.models import load_registry
from lab.config.userapp import UserApp, fit
from lab.record.models import AS_IS, ASYNC_PORT, BRIDGED, models_run_app, runs_app
from lab.record.step import amended
from lab.run.manifest import model_entry
from lab.verdict.sizing import to_run
from tests.fixture_run import FixtureStep, build_run

REGISTRY = load_registry()
PITFALLS = load_registry(Path(__file__).resolve().parents[1] / "servers" / "pitfalls.toml")


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ("uwsgi-threads", AS_IS),
        ("gunicorn-gevent", AS_IS),
        ("granian-wsgi", AS_IS),
        ("uvicorn", ASYNC_PORT),
        ("gunicorn-asyncio", ASYNC_PORT),
        ("granian-asgi", ASYNC_PORT),
    ],
    ids=lambda x: str(x),
)
def test_the_registry_knows_who_runs_a_flask_app(model: str, expected: str) -> None:
    assert REGISTRY.models[model].runs_app() == expected


def test_the_bridge_is_its_own_configuration() -> None:
    assert PITFALLS.models["uvicorn-wsgi-bridge"].runs_app() == BRIDGED
    entry = model_entry(PITFALLS.models["uvicorn-wsgi-bridge"], REGISTRY.knobs.resolve(4))
    assert "WsgiToAsgi" in entry["bridge"]


@pytest.mark.parametrize(
    ("kind", "model", "expected"),
    [
        ("wsgi", "uwsgi-threads", AS_IS),
        ("wsgi", "uvicorn", BRIDGED),
        ("asgi", "uvicorn", AS_IS),
    ],
    ids=["wsgi-under-wsgi", "wsgi-under-asgi-bridged", "asgi-under-asgi"],
)
def test_a_users_app_is_classified_by_its_own_kind(kind: str, model: str, expected: str) -> None:
    fitted = fit(UserApp("mine:app", kind), REGISTRY.models[model])
    assert fitted is not None
    assert fitted[0].runs_app() == expected
    manifest = {
        "scenario": {"app": {"target": "mine:app", "kind": kind}},
        "models": {model: model_entry(fitted[0], REGISTRY.knobs.resolve(4))},
    }
    assert models_run_app(manifest) == {model: expected}


def test_old_manifests_without_a_bridge_field_classify_by_their_app() -> None:
    assert runs_app("wsgi", "") == AS_IS and runs_app("asgi", "") == ASYNC_PORT


def steps(model: str, rps: float, p99: float, flags: tuple[str, ...] = ()) -> list[FixtureStep]:
    return [
        FixtureStep(model, c, rps_per_second=(rps * c / 100,) * 3, latencies_ms=(p99,), flags=flags)
        for c in (10, 100)
    ]


CLASSES = {
    "uwsgi-threads": AS_IS,
    "gunicorn-gevent": AS_IS,
    "uvicorn": ASYNC_PORT,
    "uvicorn-wsgi-bridge": BRIDGED,
}


def test_the_recommendation_runs_the_app_unchanged_and_the_port_stands_beside_it(
    tmp_path: Path,
) -> None:
    run_dir = build_run(
        tmp_path / "run",
        [
            *steps("uwsgi-threads", 800, 120),
            *steps("gunicorn-gevent", 600, 130),
            *steps("uvicorn", 900, 110),  # the fastest, but it serves the Quart twin
            *steps("uvicorn-wsgi-bridge", 10, 9000, flags=("serialized",)),
        ],
    )
    lines = answer(load(run_dir).points, CLASSES, "wsgi")
    said = "\n".join(lines)
    assert lines[0].startswith("your app is WSGI (Flask): runs your WSGI (Flask) app as it is: ")
    assert "needs an async port (ASGI, like the lab's Quart twin): uvicorn" in lines[0]
    unchanged = "for your app as it is, at 100 users: uwsgi-threads, 800.0 rps"
    assert lines[1].startswith(unchanged), said
    assert lines[2].startswith("if you port it to async, at 100 users: uvicorn, 900.0 rps"), said
    assert "against uwsgi-threads, 800.0 rps, p99 120 ms: throughput +12% [" in lines[2], said
    assert "no measurable difference in p99 (-8% [" in lines[2], said
    bridge = "through the bridge, at 100 users: uvicorn-wsgi-bridge, 10.0 rps, p99 9,003 ms"
    assert lines[3] == f"{bridge} (serialized: excluded from the verdict)", said


def test_the_port_is_compared_at_one_level_where_both_are_fair(tmp_path: Path) -> None:
    """uwsgi-threads is fair at 10 users only: the port is set against it there, never at 100."""
    run_dir = build_run(
        tmp_path / "run",
        [
            FixtureStep("uwsgi-threads", 10, rps_per_second=(80.0,) * 3, latencies_ms=(120.0,)),
            FixtureStep("uwsgi-threads", 100, rps_per_second=(9.0,) * 3, flags=("server_died",)),
            *steps("uvicorn", 800, 120),
        ],
    )
    lines = answer(load(run_dir).points, CLASSES, "wsgi")
    assert lines[1].startswith("for your app as it is, at 10 users: uwsgi-threads, 80.0 rps")
    port = "if you port it to async, at 10 users: uvicorn, 80.0 rps, p99 120 ms against "
    assert lines[2].startswith(port + "uwsgi-threads, 80.0 rps, p99 120 ms: "), lines
    assert "no measurable difference in throughput (+0% [" in lines[2]
    assert "p99 not compared (too few)" in lines[2]  # 240 requests: 2.4 beyond p99


def test_an_excluded_model_is_never_the_recommendation(tmp_path: Path) -> None:
    run_dir = build_run(
        tmp_path / "run",
        [*steps("uwsgi-threads", 800, 120, ("serialized",)), *steps("gunicorn-gevent", 600, 130)],
    )
    lines = answer(load(run_dir).points, CLASSES, "wsgi")
    assert "for your app as it is, at 100 users: gunicorn-gevent" in lines[1]


def test_a_run_reads_its_classes_from_the_manifest(tmp_path: Path) -> None:
    """The fixture's manifest has no `app` per model: read as the Flask app's WSGI models."""
    run = load(build_run(tmp_path / "run", steps("uwsgi-threads", 800, 120)))
    lines = run_answer(run.records, run.manifest, run.points)
    assert (
        lines[0] == "your app is WSGI (Flask): runs your WSGI (Flask) app as it is: uwsgi-threads"
    )


def test_a_users_app_is_told_how_to_run_it(tmp_path: Path) -> None:
    """The configuration measured, and the one to run on this machine's cores at the heaviest
    level: lab advise's own sizing of the throughput, latency and CPU measured there."""
    run = load(build_run(tmp_path / "run", steps("uwsgi-threads", 800, 120)))
    entry = model_entry(REGISTRY.models["uwsgi-threads"], REGISTRY.knobs.resolve(100))
    manifest = {
        **run.manifest,
        "scenario": {"app": {"target": "mine:app", "kind": "wsgi"}},
        "models": {"uwsgi-threads": entry},
        "knobs": {"processes": 1, "concurrency": 100},
        "environment": {"cpus_usable": [0, 1, 2, 3]},
    }
    records = [amended(r, server_cpu_ms_per_req=0.6) for r in run.records]
    line = run_answer(records, manifest, build(records))[-1]
    at = next(r for r in records if r.key.level == 100)
    sized = to_run(
        "uwsgi-threads", "thread", at.load.throughput_rps, at.latency.latency_ms["mean"], 0.6, 4
    )
    assert line.startswith("uwsgi-threads was measured as 1 process x 100 threads; to run it on ")
    assert "this machine's 4 cores at 100 users" in line and line.endswith(sized.why)


def test_a_tie_on_throughput_never_hides_a_p99_called_apart() -> None:
    """The stalled case of issue 46: two models tie on throughput at 20 users, one with a
    1.5 s p99 against 59 ms; the answer says the p99 beside the tie."""
    from tests.helpers import record

    records = [record("t", 380.0, users=20, p99=59.0), record("g", 380.0, users=20, p99=1503.0)]
    (line,) = [
        x for x in answer(build(records), {"t": AS_IS, "g": AS_IS}, "wsgi") if "as it is," in x
    ]
    assert "t, 380.0 rps, p99 59 ms (tied: g: tied on throughput; p99 25.5x worse" in line
    assert "picked on p99: tied on throughput with g" in line


def test_a_level_the_lab_decided_is_never_the_answer_s() -> None:
    """At the heaviest level an async model is `lab_limited`: the port's claim is not made
    there, and the words say why no level was left."""
    from tests.helpers import record

    records = [
        record("w", 100.0, users=200, p99=50.0),
        record("u", 90.0, users=200, p99=60.0),
        record("v", 120.0, users=200, p99=40.0, flags=("lab_limited",)),
    ]
    classes = {"w": AS_IS, "u": ASYNC_PORT, "v": ASYNC_PORT}
    (line,) = [x for x in answer(build(records), classes, "wsgi") if x.startswith("if you port")]
    assert line == (
        "if you port it to async: no async model has a fair result at a level where every "
        "candidate had a result of its own; at 200 users the lab's own limits or the machine "
        "decided for 1 of 2 candidates (v (lab_limited))"
    )


def test_the_answer_comes_from_the_heaviest_level_the_models_decided() -> None:
    """Issue 53's quick run: at 200 users the apparatus excluded three of the four as-is
    candidates (`lab_limited`), so the survivor was named; at 100 users every one was fair. The
    answer is given at 100 users, with 200 users said and why; a model's own loss (serialized)
    at 100 users does not move the level: it is a result, and the model loses."""
    from tests.helpers import record

    as_is = ("granian-wsgi", "gunicorn-gevent", "uwsgi-gevent", "uwsgi-threads")
    limited = {"granian-wsgi", "uwsgi-gevent", "uwsgi-threads"}
    records = [
        *(record(m, 950.0 if m == "granian-wsgi" else 900.0, users=100) for m in as_is[:3]),
        record("uwsgi-threads", 990.0, users=100, flags=("serialized",)),
        *(
            record(m, 1900.0, users=200, flags=("lab_limited",) if m in limited else ())
            for m in as_is
        ),
    ]
    lines = answer(build(records), dict.fromkeys(as_is, AS_IS), "wsgi")
    assert lines[1].startswith("for your app as it is, at 100 users: granian-wsgi, 950.0 rps"), (
        lines
    )
    assert "; not compared at 100 users: uwsgi-threads (serialized)" in lines[1]
    assert lines[1].endswith(
        "; not at 200 users: at 200 users the lab's own limits or the machine decided for 3 of 4 "
        "candidates (granian-wsgi (lab_limited), uwsgi-gevent (lab_limited), uwsgi-threads "
        "(lab_limited))"
    )


def test_a_candidate_not_measured_at_a_level_keeps_the_answer_below_it() -> None:
    from tests.helpers import record

    records = [
        record("w", 100.0, users=10),
        record("x", 90.0, users=10),
        record("w", 900.0, users=100),  # x was never measured at 100 users (a stopped run)
    ]
    lines = answer(build(records), {"w": AS_IS, "x": AS_IS}, "wsgi")
    assert lines[1].startswith("for your app as it is, at 10 users: w, 100.0 rps"), lines
    assert "decided for 1 of 2 candidates (x (not measured))" in lines[1]


@pytest.mark.parametrize(
    ("gevent_rps", "expected"),
    [
        (
            370.0,
            "uwsgi-threads, 380.0 rps, p99 59 ms (tied: gunicorn-gevent: tied on throughput; p99 "
            "25.5x worse, apart beyond noise)",
        ),
        (
            385.0,
            "uwsgi-threads, 380.0 rps, p99 59 ms (tied: gunicorn-gevent: tied on throughput; p99 "
            "25.5x worse, apart beyond noise); picked on p99: tied on throughput with "
            "gunicorn-gevent, p99 lower beyond noise",
        ),
    ],
    ids=["the-tie-is-worse-on-p99", "the-tie-is-better-on-p99"],
)
def test_a_tie_on_throughput_in_a_run_never_hides_a_p99_called_apart(
    tmp_path: Path, gevent_rps: float, expected: str
) -> None:
    """Issue 46's case: 1.5 s stalls under gevent beside uWSGI threads, tied on throughput by
    the floor: the answer says how far apart their p99s are, and which rule picked."""
    run_dir = build_run(
        tmp_path / "run",
        [*steps("uwsgi-threads", 380, 59), *steps("gunicorn-gevent", gevent_rps, 1503)],
    )
    lines = answer(load(run_dir).points, CLASSES, "wsgi")
    assert lines[1] == f"for your app as it is, at 100 users: {expected}", lines


def test_a_claim_that_compared_every_candidate_names_none_left_out() -> None:
    from tests.helpers import record

    records = [record("w", 100.0, users=200, p99=50.0), record("u", 90.0, users=200, p99=60.0)]
    lines = answer(build(records), {"w": AS_IS, "u": ASYNC_PORT}, "wsgi")
    (line,) = [x for x in lines if x.startswith("if you port")]
    assert line.endswith("throughput -10% [-19%, -1%], p99 not compared (too few)"), line


@pytest.mark.parametrize(
    ("rows", "said"),
    [
        ((("w", ()),), None),  # the bridged model has no step: no line
        ((("w", ()), ("b", ("lab_limited",))), "(lab_limited: excluded from the verdict)"),
        ((("b", ()),), "(no model that runs your app as it is has a fair result beside it)"),
    ],
    ids=["no-steps", "excluded", "nothing-beside-it"],
)
def test_a_bridged_model_compared_with_nothing_says_why(
    rows: tuple[tuple[str, tuple[str, ...]], ...], said: str | None
) -> None:
    from tests.helpers import record

    records = [record(m, 100.0 if m == "w" else 90.0, flags=flags) for m, flags in rows]
    lines = answer(build(records), {"w": AS_IS, "b": BRIDGED}, "wsgi")
    bridge = [x for x in lines if x.startswith("through the bridge")]
    assert len(lines) == 2 + len(bridge)  # the classes, the answer as it is, the bridge if any
    if said is None:
        assert bridge == []
    else:
        assert bridge == [f"through the bridge, at 10 users: b, 90.0 rps, p99 100 ms {said}"]


def test_a_run_s_app_kind_and_a_manifest_without_a_scenario(tmp_path: Path) -> None:
    """The app's kind comes from the manifest (ASGI here); a manifest with no scenario is the
    lab's own app (WSGI), and is told no way to run a user's app."""
    run = load(build_run(tmp_path / "run", steps("uwsgi-threads", 800, 120)))
    asgi = {**run.manifest, "scenario": {"app": {"target": "mine:app", "kind": "asgi"}}}
    assert run_answer(run.records, asgi, run.points)[0].startswith("your app is ASGI: ")
    bare = {k: v for k, v in run.manifest.items() if k != "scenario"}
    lines = run_answer(run.records, bare, run.points)
    assert lines[0].startswith("your app is WSGI (Flask): ")
    assert not any("was measured as" in x for x in lines)


@pytest.mark.parametrize(
    "app,said",
    [
        (
            {"target": "todosite.wsgi:application", "kind": "wsgi", "framework": "Django"},
            "WSGI (Django)",
        ),
        ({"target": "plain:app", "kind": "wsgi", "framework": ""}, "WSGI"),
        ({"target": "older:app", "kind": "wsgi"}, "WSGI"),  # a run made before the check named it
        ({"target": "api:app", "kind": "asgi", "framework": "FastAPI"}, "ASGI (FastAPI)"),
    ],
    ids=["django", "plain-wsgi", "recorded-before", "fastapi"],
)
def test_the_answer_names_the_user_s_framework_not_the_lab_s(
    tmp_path: Path, app: dict[str, str], said: str
) -> None:
    """A user's app is named by its own interface and the framework its check found, never by
    the lab's own Flask app's: a Django app is not told it is "WSGI (Flask)"."""
    run = load(build_run(tmp_path / "run", steps("uwsgi-threads", 800, 120)))
    manifest = {**run.manifest, "scenario": {"app": app}}
    first = run_answer(run.records, manifest, run.points)[0]
    assert first.startswith(f"your app is {said}: runs your {said} app") or first.startswith(
        f"your app is {said}: needs an async port"
    ), first
