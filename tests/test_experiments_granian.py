"""`lab reproduce granian-long-io`: a real, short run (real servers, real oha and rewrk), the
explanation logic on hand-built figures, and its invariants over generated inputs."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console

from experiments import granian_long_io as g
from experiments.common import load_published, reproduce
from experiments.granian_long_io import cases, clients, may2025
from experiments.granian_long_io.gaps import (
    LITTLE_NOISE,
    Reading,
    counts_errors,
    explain,
    limit,
    little,
    verdict,
)
from lab.cli.reproduce import EXPERIMENTS
from lab.system import tools

PUB = load_published("granian_long_io")
OHA_MISSING = clients.missing()
# Test-sized: the harness's sequence in about 3 s per case, two servers (one that holds every
# connection, one that holds one), and the May 2025 row.
TINY = replace(
    g.PROTOCOLS["quick"],
    bench_s=1.5,
    primer_s=0.5,
    warmup_s=0.5,
    pauses_s=(0.2, 0.2, 0.2),
    levels=(64,),
    only=("Granian ASGI", "uWSGI", "uWSGI (May 2025 row)"),
)


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> dict:
    if OHA_MISSING:
        pytest.skip(OHA_MISSING)
    out = tmp_path_factory.mktemp("granian")
    quiet = Console(file=Path("/dev/null").open("w"))  # noqa: SIM115 - lives for the test
    path = reproduce(EXPERIMENTS["granian-long-io"], "quick", out, TINY, quiet)
    return dict(json.loads((path / "reproduction.json").read_text()), path=path)


def rows_of(table: dict, label: str) -> dict[str, dict]:
    """The rows of one case by metric: its section is its label, maybe with a note in brackets."""
    return {
        r["metric"]: r
        for r in table["rows"]
        if r["section"] == label or r["section"].startswith(label + " (")
    }


def test_published_rows_sit_beside_measured_ones_with_both_rates(ran: dict) -> None:
    """Each published row shows the page's RPS and its 200-rate beside the measured ones."""
    for name, key in (("Granian ASGI", "granian_asgi"), ("uWSGI", "uwsgi")):
        for wait in ("10", "100"):
            got = rows_of(ran, f"{name}, {wait} ms, c512")
            fig = PUB["figures"][key][f"{wait}ms"]
            rps, ok = got["RPS (oha requestsPerSec: errors counted)"], got["answers 200 per second"]
            assert rps["published"] == fig["rps"] and rps["measured"] is not None
            assert ok["published"] == g.shown(fig["total"] / 10) and ok["measured"] is not None
            assert "Little:" in ok["note"] and "aborted due to deadline" in rps["note"]
            assert rps["evidence"]["argv"]


def test_one_thread_is_named_the_limit_and_its_rps_counts_errors(ran: dict) -> None:
    """uWSGI as published (no --threads) answers at most 1 / wait: the row says one thread, and
    its RPS (oha's, which counts the requests it cut off) is above its 200-rate and says so."""
    got = rows_of(ran, "uWSGI, 100 ms, c512")["answers 200 per second"]
    assert "limit: one thread" in got["note"]
    assert got["measured"] <= 1 / 0.1 * 1.5
    assert "RPS counts errors" in got["note"]


def test_every_gap_is_explained_and_nothing_is_owed(ran: dict) -> None:
    for r in ran["rows"]:
        if r["gap"]:
            assert r["explanation"], f"{r['section']}: {r['metric']}: a gap without a reason"
    assert ran["unexplained_gaps"] == []


def test_the_may_2025_row_is_rebuilt_with_its_own_client(ran: dict) -> None:
    """rewrk (where installed) counts far more than one thread can answer; the explanation says
    so from Little's law on the page's figures and from the measured close."""
    got = rows_of(ran, "uWSGI (May 2025 row), 100 ms, c128")
    rps = got["RPS (rewrk requests_avg: failed requests counted)"]
    assert rps["published"] == 16474
    if clients.missing("rewrk") is None:
        assert rps["measured"] > 10 * 3, "rewrk should count far more than 10 answers/s"
    text = ran["conclusion"]
    assert "99.94% of what was counted were not answers" in text
    assert "closes each connection after its one answer" in text


def test_recommended_configurations_are_swept_with_a_verdict(ran: dict) -> None:
    table = ran["details"]["as each server's docs recommend"]
    assert {(r["server"], r["wait ms"]) for r in table} == {
        ("Granian ASGI", 10),
        ("Granian ASGI", 100),
        ("uWSGI", 10),
        ("uWSGI", 100),
    }
    assert all(r["limit"] and r["answers 200/s"] > 0 for r in table)


def test_without_oha_the_rows_fail_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No oha: every row is `failed` with one line that says what to install, nothing runs."""
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr(tools, "CARGO_BIN", tmp_path)  # where clients.binary looks
    why = clients.missing()
    assert why is not None and "oha is not installed" in why and "\n" not in why
    p = replace(TINY, may2025=False, recommended=False, only=("Granian ASGI",))
    quiet = Console(file=Path("/dev/null").open("w"))  # noqa: SIM115 - lives for the test
    path = reproduce(EXPERIMENTS["granian-long-io"], "quick", tmp_path, p, quiet)
    table = json.loads((path / "reproduction.json").read_text())
    assert table["rows"] and all(r["failed"] == why for r in table["rows"])


# The explanation on hand-built figures.


def reading(**kw: float) -> Reading:
    base = dict(connections=512, sleep_s=0.01, rps=0.0, ok_rps=0.0, avg_ms=0.0, cores=2)
    return Reading(**{**base, **kw})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kw", "expected"),
    [
        (dict(rps=413, ok_rps=97.8, avg_ms=995, threads=1), "one thread"),
        (dict(sleep_s=0.1, rps=5066, ok_rps=5017, avg_ms=101), "the ideal"),
        (
            dict(rps=11002, ok_rps=10956, avg_ms=46, server_cpu_pct=99, host_cpu_pct=150),
            "one process on one core",
        ),
        (
            dict(rps=9000, ok_rps=9000, avg_ms=55, server_cpu_pct=60, host_cpu_pct=195),
            "the machine's cores",
        ),
        (dict(rps=0, ok_rps=0, avg_ms=0), "no answers"),
    ],
    ids=["uwsgi-one-thread", "granian-100ms-ideal", "gevent-one-core", "shared-machine", "nothing"],
)
def test_limit_names_what_bounds_the_row(kw: dict, expected: str) -> None:
    assert limit(reading(**kw))[0] == expected


def test_published_gevent_gap_is_explained_by_cores_and_the_client() -> None:
    """gunicorn gevent at 10 ms here: one core full; the explanation names the page's 16 CPUs,
    the CPU the ideal would need and oha's own share."""
    m = reading(
        rps=3000, ok_rps=2990, avg_ms=170, server_cpu_pct=98, client_cpu_pct=60, host_cpu_pct=170
    )
    said = explain(PUB["figures"]["gunicorn_gevent"]["10ms"], m, PUB["cpus"])
    assert "one process on one core" in said and "16 CPUs" in said and "oha itself used 60%" in said


def test_published_uwsgi_rps_is_said_to_count_errors() -> None:
    m = reading(sleep_s=0.1, rps=60, ok_rps=3, avg_ms=2000, threads=1)
    said = explain(PUB["figures"]["uwsgi"]["100ms"], m, PUB["cpus"])
    assert "The page's RPS counts errors: 0.5 of its 54/s were 200 answers" in said
    assert "one thread" in said
    # 0.5 answers/s of a ceiling of 10: both runs began behind the warm-up's cut-off requests
    assert "In the page's run the thread(s) answered 0.5/s of their 10" in said
    assert "up to 51.2 s of work" in said and "In this run" in said


def test_may_2025_explanation_without_rewrk_still_says_the_arithmetic() -> None:
    said = may2025.explanation(PUB["figures"], {"failed": "rewrk is not installed"}, None)
    assert "127 requests in flight of 128" in said and "at most 10/s" in said


def test_recommended_argv_give_threads_enough_for_the_connections() -> None:
    for case in cases.recommended_cases((512,)):
        argv = cases.argv(case, 24999)
        if case.server.threads:
            assert cases.threads(case) * cases.processes(case.server) >= case.connections
        assert "127.0.0.1" in " ".join(argv)


# Invariants over generated inputs.


@given(
    connections=st.integers(1, 600),
    duration_s=st.floats(0.5, 20),
    data=st.data(),
)
def test_littles_law_never_exceeds_the_connections_of_a_closed_loop(
    connections: int, duration_s: float, data: st.DataObject
) -> None:
    """In a closed loop each connection's requests follow one another, so the time they spent in
    the system adds up to at most connections x duration: Little's law on the answers and their
    average latency can exceed the connections by no more than noise."""
    latencies: list[float] = []
    for _ in range(min(connections, 20)):
        per = data.draw(st.lists(st.floats(0.0001, duration_s), min_size=0, max_size=30))
        kept, total = [], 0.0
        for x in per:
            if total + x > duration_s:
                break
            kept.append(x)
            total += x
        latencies += kept * (connections // min(connections, 20))
    if not latencies:
        return
    rate = len(latencies) / duration_s
    avg_ms = 1000 * sum(latencies) / len(latencies)
    r = reading(connections=connections, rps=rate, ok_rps=rate, avg_ms=avg_ms)
    assert r.in_flight <= connections * (1 + LITTLE_NOISE)
    assert math.isclose(r.in_flight, little(rate, avg_ms))


@given(
    ok=st.floats(0, 50_000),
    extra=st.floats(0, 50_000),
    sleep_s=st.sampled_from([0.01, 0.1]),
    threads=st.integers(0, 4),
)
def test_a_row_whose_200_rate_is_below_its_rps_is_flagged(
    ok: float, extra: float, sleep_s: float, threads: int
) -> None:
    """Beyond rounding (1%), an RPS above the 200-rate is always said to count errors, in the
    row's own verdict; an RPS equal to it never is."""
    r = reading(sleep_s=sleep_s, rps=ok + extra, ok_rps=ok, avg_ms=20, threads=threads)
    flagged = "RPS counts errors" in verdict(r)
    assert flagged == counts_errors(r)
    if extra > 0.01 * ok + 1e-9 and extra > 0:
        assert flagged
    if extra == 0:
        assert not flagged


def test_quick_stays_within_a_few_minutes() -> None:
    """A guard on the protocol's size, not a timing: each case is the harness's sequence (primer,
    warm-up, measured run, pauses) plus about 2 s to start and stop its server, and the May 2025
    row adds one rewrk sequence on a fresh server."""
    p = g.PROTOCOLS["quick"]
    per_case = p.primer_s + p.warmup_s + p.bench_s + sum(p.pauses_s) + 2
    assert len(g.all_cases(p)) * per_case + per_case <= 5 * 60
    d = g.PROTOCOLS["default"]
    assert (d.bench_s, d.primer_s, d.primer_c, d.warmup_s) == (10, 4, 8, 3)  # the harness's
    assert d.connections == 512


def test_without_the_warm_up_uwsgis_thread_answers_near_its_ceiling(ran: dict) -> None:
    """The deciding variant: uWSGI as published, no primer or warm-up, answers far more at 100 ms
    than in the harness's sequence (which starts behind the warm-up's cut-off requests), and
    never above its one thread's ceiling."""
    cold = rows_of(ran, "uWSGI, 100 ms, c512, no primer or warm-up")["answers 200 per second"]
    warm = rows_of(ran, "uWSGI, 100 ms, c512")["answers 200 per second"]
    assert cold["published"] is None and "limit: one thread" in cold["note"]
    assert warm["measured"] < cold["measured"] <= 10 * 1.2
    assert "without the primer and warm-up answered" in ran["conclusion"]
