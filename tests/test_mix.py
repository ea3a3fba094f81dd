"""A traffic mix: weighted routes parsed from --path, a scenario file or an access log, swept
together under a real `lab run --app`, each route's latency recorded apart."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lab.cli.measure.appmix import traffic
from lab.config.mix import MixRoute, split_weight, weighted_ms
from lab.config.scenario import load_scenario
from lab.record import hist
from lab.record.errors import LabError
from tests.helpers import flask_app, lab_cli, step_rows

MIX_APP = flask_app("""
import time


@app.get("/health")
def health():
    return "ok"


@app.get("/fast/<int:n>")
def fast(n):
    return {"n": n}


@app.get("/slow")
def slow():
    time.sleep(0.1)
    return "slow"
""")
LINE = '127.0.0.1 - - [26/Nov/2026:13:55:36 +0000] "{} HTTP/1.1" {} 5 "-" "curl/8"'


def opts(*paths: str, **more: Any) -> dict[str, Any]:
    given = {"app_paths": paths, "app_body": None, "app_headers": (), "probe_path": None}
    return {**given, **more}


@pytest.mark.parametrize(
    "text,route,weight",
    [
        ("/list#5", "/list", 5.0),
        ("/search?q=5", "/search?q=5", None),  # `=` in a query is no weight
        ("/at/12:30#0.5", "/at/12:30", 0.5),  # nor is `:`
        ("POST /orders#2", "POST /orders", 2.0),
        ("/health#0", "/health", 0.0),
    ],
    ids=["weight", "query-equals", "colon-path", "method", "zero"],
)
def test_a_weight_follows_a_hash_that_no_request_contains(
    text: str, route: str, weight: float | None
) -> None:
    assert split_weight(text) == (route, weight)


@pytest.mark.parametrize("text", ["/a#", "/a#x", "/a#-1", "/a#nan", "/a#inf"])
def test_a_bad_weight_is_a_one_line_error(text: str) -> None:
    with pytest.raises(LabError, match="must be a number >= 0"):
        split_weight(text)


def test_without_weights_the_last_route_is_loaded_alone_as_before() -> None:
    found = traffic(opts("/health", "/work"))
    assert [r.label for r in found.load] == ["/work"] and found.mix == ()
    assert found.probe is not None and found.probe.path == "/work"


def test_weighted_routes_are_the_mix_and_the_others_only_checked() -> None:
    found = traffic(opts("/health", "/list#3", "/item/7#1", "/admin#0"))
    assert [r.label for r in found.routes] == ["/health", "/list", "/item/7", "/admin"]
    assert [(m.label, m.weight) for m in found.mix] == [("/list", 3.0), ("/item/7", 1.0)]
    assert found.probe is None  # the check probes the mix's slowest route
    with pytest.raises(LabError, match="listed twice"):
        traffic(opts("/list#3", "/list#1"))
    with pytest.raises(LabError, match="--path /ROUTE .* --mix, --access-log or --har"):
        traffic(opts())
    with pytest.raises(LabError, match="--log-top: only with --access-log"):
        traffic(opts("/list#1", log_top=3))


def test_log_methods_must_be_methods_that_change_data(tmp_path: Path) -> None:
    log = tmp_path / "access.log"
    log.write_text(LINE.format("GET /a", 200) + "\n" + LINE.format("POST /b", 201) + "\n")
    found = traffic(opts(access_log=log, log_methods=("post",), app_body="{}"))
    assert [(m.label, m.weight) for m in found.mix] == [("/a", 1.0), ("POST /b", 1.0)]
    assert found.load[1].body == "{}"
    with pytest.raises(LabError, match="--log-methods GET,TRACE: expected some of POST"):
        traffic(opts(access_log=log, log_methods=("GET", "trace")))


def test_d_is_the_mix_weighted_service_time() -> None:
    mix = (MixRoute("/a", "GET", "/a", 3), MixRoute("/b", "GET", "/b", 1))
    assert weighted_ms(mix, {"/a": 2.0, "/b": 102.0}) == 27.0
    assert weighted_ms(mix, {"/a": 2.0}) == 0.0  # a route never timed: no ideal


def test_a_scenario_file_names_the_mix(tmp_path: Path) -> None:
    path = tmp_path / "mix.toml"
    path.write_text('levels = [4]\npaths = ["/health", "/list#3", "/item/7#1"]\n')
    scenario = load_scenario(str(path))
    found = traffic(opts(), scenario.paths)
    assert [m.label for m in found.mix] == ["/list", "/item/7"]
    (tmp_path / "bad.toml").write_text("paths = [1]\n")
    with pytest.raises(LabError, match="paths must be a list of strings"):
        load_scenario(str(tmp_path / "bad.toml"))


@pytest.fixture(scope="module")
def mix_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess]:
    """One real sweep of a Flask app from its access log alone (no --path): 3 of 4 requests to
    fast routes (one shape, /fast/{id}), 1 of 4 to a route that sleeps 100 ms."""
    root = tmp_path_factory.mktemp("mix")
    (root / "mix_app.py").write_text(MIX_APP)
    lines = [LINE.format(f"GET /fast/{n}", 200) for n in (1, 1, 2, 3, 4, 5)]
    lines += [LINE.format("GET /slow", 200)] * 2 + [LINE.format("POST /orders", 201)]
    lines += [LINE.format("GET /gone", 404), "a line that is no request", ""]
    (root / "access.log").write_text("\n".join(lines) + "\n")
    out = root / "out"
    argv = lab_cli(
        *("run", "--app", "mix_app:app", "--app-dir", str(root)),
        *("--access-log", str(root / "access.log"), "--models", "uwsgi-threads"),
        *("--knob", "concurrency=8", "--levels", "8", "--duration", "3", "--warmup", "0"),
        *("--out", str(out)),
    )
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    (run_dir,) = out.iterdir()
    return run_dir, done


def test_the_log_mix_and_what_it_left_out_are_printed_before_any_load(mix_run: Any) -> None:
    _, done = mix_run
    out = done.stdout
    assert "GET /fast/{id}" in out and "75.0%" in out and "25.0%" in out
    # "left out of the mix" follows the log's path in the table's title, which rich wraps where
    # the path is long (pytest-xdist's tmp paths are): the order is read from its rows instead
    probe = out.index("every model, probe on /slow")
    for said in ("a method that changes data", "answered 4xx or 5xx", "does not parse"):
        assert out.index(said) < probe, said


def test_the_mix_is_swept_and_each_route_recorded_apart(mix_run: Any) -> None:
    run_dir, _ = mix_run
    scenario = json.loads((run_dir / "manifest.json").read_text())["scenario"]
    mix = {m["label"]: m["weight"] for m in scenario["app"]["mix"]}
    assert mix == {"/fast/1": 6.0, "/slow": 2.0}
    assert 20 <= scenario["delay_ms"] < 40  # d: 3/4 of ~1 ms + 1/4 of ~100 ms
    (step,) = step_rows(run_dir)
    routes = step["routes"]
    assert set(routes) == {"/fast/1", "/slow"}
    assert sum(r["requests"] for r in routes.values()) == step["requests"]
    assert sum(r["ok"] for r in routes.values()) == step["ok"]
    slow, fast = routes["/slow"], routes["/fast/1"]
    assert 95 <= slow["latency_ms"]["p50"] < 200 and fast["latency_ms"]["p50"] < 50
    assert 0.15 < slow["requests"] / step["requests"] < 0.35  # drawn by weight, 1 in 4
    by_tag = {h.get_tag(): h for h in hist.read_hlog(run_dir / slow["histogram"])}
    assert by_tag[slow["tag"]].get_total_count() == slow["ok"]


def test_summary_report_and_compare_show_each_route_beside_the_mix(mix_run: Any) -> None:
    run_dir, done = mix_run
    assert "per route" in done.stdout and "(mix)" in done.stdout
    report = subprocess.run(lab_cli("report", str(run_dir)), capture_output=True, text=True)
    assert report.returncode == 0, report.stderr
    assert "Per route" in (run_dir / "report.html").read_text()
    compare = subprocess.run(
        lab_cli("compare", str(run_dir), str(run_dir)), capture_output=True, text=True
    )
    assert compare.returncode == 0 and "/slow" in compare.stdout.split("per route")[-1]


def test_the_probe_takes_the_slowest_route_and_fast_routes_are_no_reason_to_refuse(
    mix_run: Any, tmp_path: Path
) -> None:
    run_dir, _ = mix_run
    check = json.loads((run_dir / "appcheck.json").read_text())
    assert check["probe_path"] == "/slow"
    (model,) = check["models"]
    assert model["probe"]["route"] == "/slow" and not model["error"]
    app_dir = run_dir.parent.parent
    argv = lab_cli(
        *("run", "--app", "mix_app:app", "--app-dir", str(app_dir), "--check-only"),
        *("--path", "/health", "--path", "/fast/1#3", "--path", "/fast/2#1"),
        *("--models", "uwsgi-threads", "--out", str(tmp_path)),
    )
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    (fast,) = json.loads(next(tmp_path.glob("*/appcheck.json")).read_text())["models"]
    assert fast["probe"] is None and not fast["error"] and "not probed" in fast["note"]


@settings(max_examples=200, deadline=None)
@given(
    st.text(alphabet=st.characters(blacklist_characters="#", blacklist_categories=("Cs",))),
    st.one_of(st.none(), st.integers(min_value=0, max_value=10**6)),
)
def test_any_route_without_a_hash_keeps_its_text_and_its_weight(
    route: str, weight: int | None
) -> None:
    text = route if weight is None else f"{route}#{weight}"
    assert split_weight(text) == (route.strip(), weight)


@pytest.mark.parametrize(
    "generators,load",
    [
        (2, ("--levels", "8")),
        (2, ("--mode", "open", "--rates", "40")),
        (1, ("--mode", "open", "--rates", "40")),
    ],
    ids=["closed-2-generators", "open-2-generators", "open-1-generator"],
)
def test_each_route_is_kept_apart_in_the_open_loop_and_on_several_generators(
    mix_run: Any, tmp_path: Path, generators: int, load: tuple[str, ...]
) -> None:
    """Several generator processes (locust workers under a master): each worker draws the mix's
    routes and reports each route's histogram with its second's, the master merges them; the
    open loop's answers after the window (its drain) count in their routes too."""
    app_dir = mix_run[0].parent.parent
    argv = lab_cli(
        *("run", "--app", "mix_app:app", "--app-dir", str(app_dir)),
        *("--generators", str(generators)),
        *("--path", "/health", "--path", "/fast/1#3", "--path", "/slow#1", *load),
        *("--models", "uwsgi-threads", "--knob", "concurrency=8", "--duration", "2"),
        *("--warmup", "0", "--out", str(tmp_path)),
    )
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    (step,) = step_rows(next(tmp_path.glob("*/steps.jsonl")).parent)
    assert step["generators"] == generators and set(step["routes"]) == {"/fast/1", "/slow"}
    assert sum(r["ok"] for r in step["routes"].values()) == step["ok"] > 0
    assert step["routes"]["/slow"]["latency_ms"]["p50"] >= 95


def test_a_loaded_route_no_model_answers_is_refused_in_one_line(
    mix_run: Any, tmp_path: Path
) -> None:
    app_dir = mix_run[0].parent.parent
    argv = lab_cli(
        *("run", "--app", "mix_app:app", "--app-dir", str(app_dir), "--check-only"),
        *("--path", "/health", "--path", "/fast/1#3", "--path", "/gone#1"),
        *("--models", "uwsgi-threads", "--out", str(tmp_path)),
    )
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    assert "/gone: no model answered it with a status below 400" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_half_written_routes_histogram_is_read_as_far_as_it_is_complete(
    mix_run: Any, tmp_path: Path
) -> None:
    run_dir = shutil.copytree(mix_run[0], tmp_path / "run")
    for path in run_dir.glob("histograms/*/*.routes.hlog"):
        path.write_bytes(path.read_bytes()[:300])
    report = subprocess.run(lab_cli("report", str(run_dir)), capture_output=True, text=True)
    assert report.returncode == 0 and "Traceback" not in report.stderr, report.stderr
