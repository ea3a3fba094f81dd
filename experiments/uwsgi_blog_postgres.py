"""`uwsgi-blog-postgres`: the uWSGI blog's psycopg2 bonus, with real PostgreSQL behind the app.

A Flask view spends half the delay on an HTTP call to a slow upstream and half in PostgreSQL's
`pg_sleep`; uWSGI runs it with `--gevent`; `ab -n 10 -c 5`. The blog measured 6.670 s with plain
psycopg2, whose C-level socket waits block the gevent hub (the pg halves run one after another),
and 3.148 s once psycogreen made psycopg2 yield to the hub. This reruns both, plus psycopg 3
(gevent-aware from 3.1.14) and uWSGI's threads model for contrast, using the lab's own app
(`/db?delay_ms=...&upstream_ms=...`), mock upstream, managed PostgreSQL and ab-style client.
"""

from __future__ import annotations

import contextlib
import math
import shutil
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from experiments.apachebench import lab_client
from experiments.common import (
    REPRODUCED_WITHIN,
    Reproduction,
    Row,
    RunDir,
    free_port,
    load_published,
    no_answer,
    serving,
)
from lab.backends import databases
from lab.backends.base import upstream_argv
from lab.system.resources import CODE_ROOT
from servers.common import expected_body

MODELS = {
    "uwsgi-gevent": "uwsgi --http-socket --gevent N --gevent-early-monkey-patch, the lab app",
    "uwsgi-threads": "uwsgi --http-socket --threads N, the lab's Flask app",
}


@dataclass(frozen=True)
class Case:
    name: str
    model: str  # "gevent" | "threads"
    driver: str  # LAB_DB_DRIVER: psycopg2 | psycopg2-green | psycopg
    published: str = ""  # key in uwsgi_blog_postgres.toml [figures]


CASES = (
    Case("gevent, psycopg2 (no psycogreen)", "gevent", "psycopg2", "psycopg2"),
    Case("gevent, psycopg2 + psycogreen", "gevent", "psycopg2-green", "psycopg2_psycogreen"),
    Case("gevent, psycopg 3", "gevent", "psycopg"),
    Case("threads, psycopg2", "threads", "psycopg2"),
)


@dataclass(frozen=True)
class Protocol:
    delay_s: float = 1.0  # half over HTTP, half in pg_sleep
    n: int = 10
    c: int = 5
    workers: int = 100  # greenlets or threads per uWSGI process (the blog: --gevent 2000)
    cases: tuple[Case, ...] = CASES
    deadline_s: float = 60.0


PROTOCOLS = {"default": Protocol(), "quick": Protocol(delay_s=0.4, deadline_s=20.0)}


def uwsgi_argv(case: Case, p: Protocol, port: int) -> list[str]:
    exe = shutil.which("uwsgi") or str(Path(sys.executable).with_name("uwsgi"))
    argv = [
        exe,
        "--http-socket",
        f"127.0.0.1:{port}",
        "--master",
        "--virtualenv",
        sys.prefix,
        "--pythonpath",
        str(CODE_ROOT),
        "--module",
        "servers.app_wsgi:app",
        "--listen",
        "1024",
        "--die-on-term",
        "--need-app",
        "--no-orphans",
        "--disable-logging",
    ]
    if case.model == "threads":
        return [*argv, "--threads", str(p.workers), "--enable-threads"]
    return [*argv, "--gevent", str(p.workers), "--gevent-early-monkey-patch"]


def measure(
    p: Protocol, run: RunDir, index: int, case: Case, env: dict[str, str]
) -> dict[str, Any]:
    half_ms = int(p.delay_s * 500)
    path = f"/db?delay_ms={half_ms}&upstream_ms={half_ms}"
    port = free_port()
    server_env = {**env, "LAB_DB_DRIVER": case.driver, "LAB_DB_POOL": str(p.workers)}
    log = run.path / f"logs/case{index:02d}.log"
    with serving(
        uwsgi_argv(case, p, port),
        f"http://127.0.0.1:{port}/health",
        log,
        env=server_env,
        timeout_s=60,
    ):
        url = f"http://127.0.0.1:{port}{path}"
        expect = expected_body(path).decode()
        r = lab_client(url, p.n, p.c, p.deadline_s, p.deadline_s, expect=expect)
    ideal = math.ceil(p.n / p.c) * p.delay_s
    out = {
        "case": case.name,
        "index": index,
        "model": case.model,
        "driver": case.driver,
        "delay_s": p.delay_s,
        **r,
        "ideal_s": ideal,
        "x_ideal": r["time_taken_s"] / ideal,
    }
    run.record(out)
    return out


def run(p: Protocol, run: RunDir) -> Reproduction:
    pub = load_published("uwsgi_blog_postgres")["figures"]
    with databases.running(("postgres",), run.path) as dbs, upstream(run) as upstream_url:
        env = {**databases.environment(dbs), "LAB_UPSTREAM_URL": upstream_url}
        results = [measure(p, run, i, case, env) for i, case in enumerate(p.cases, 1)]
    rows = [row(p, case, m, pub) for case, m in zip(p.cases, results, strict=True)]
    details = [
        {
            "case": m["case"],
            "time_s": round(m["time_taken_s"], 3),
            "x_ideal": round(m["x_ideal"], 2),
            "ok": m["ok"],
            "errors": sum(m["errors"].values()),
            "p50_ms": m["latency_ms"]["p50"],
            "p99_ms": m["latency_ms"]["p99"],
        }
        for m in results
    ]
    return Reproduction(rows, conclude(p, results, pub), [], {"cases": details})


def upstream(run: RunDir) -> Any:
    """The lab's mock upstream on a free port (each request says its own delay)."""
    port = free_port()
    argv = upstream_argv(port)
    url = f"http://127.0.0.1:{port}"
    return _yield_url(serving(argv, f"{url}/health", run.path / "logs/upstream.log"), url)


@contextlib.contextmanager
def _yield_url(server: Any, url: str) -> Iterator[str]:
    with server:
        yield url


def row(p: Protocol, case: Case, m: dict[str, Any], pub: dict[str, float]) -> Row:
    """Seconds beside the published seconds; at a scaled delay, both as multiples of the ideal."""
    published = pub.get(case.published) if case.published else None
    if why := no_answer(m):
        return Row.of_failure(case.name, "time taken for tests", "s", published, why)
    note = (
        f"{m['x_ideal']:.2f}x ideal ({m['ideal_s']:g} s), {m['ok']}/{p.n} ok, "
        f"p50 {m['latency_ms']['p50']:.0f} ms"
    )
    if m["deadline_hit"]:
        return Row(
            case.name,
            "time taken for tests",
            "s",
            published,
            f">{m['time_taken_s']:.0f} s ({m['ok']}/{p.n} ok)",
            note,
        )
    if p.delay_s == 1.0:
        return Row(
            case.name, "time taken for tests", "s", published, round(m["time_taken_s"], 3), note
        )
    ideal_pub = math.ceil(p.n / p.c) * 1.0
    return Row(
        case.name,
        f"time / ideal (delay {p.delay_s:g} s"
        + (f"; published {published} s)" if published else ")"),
        "x ideal",
        round(published / ideal_pub, 3) if published else None,
        round(m["x_ideal"], 3),
        note,
    )


def conclude(p: Protocol, results: list[dict[str, Any]], pub: dict[str, float]) -> str:
    by = {m["driver"] + "/" + m["model"]: m for m in results if not no_answer(m)}
    plain, green = by.get("psycopg2/gevent"), by.get("psycopg2-green/gevent")
    if plain is None or green is None:
        return "Both psycopg2 cases are needed for a conclusion."
    gap = plain["time_taken_s"] / green["time_taken_s"]
    published_gap = pub["psycopg2"] / pub["psycopg2_psycogreen"]
    said = "reproduces" if gap >= published_gap / REPRODUCED_WITHIN else "does not reproduce"
    text = (
        f"Under uWSGI --gevent, plain psycopg2 took {plain['time_taken_s']:.2f} s and psycopg2 "
        f"with psycogreen {green['time_taken_s']:.2f} s (published {pub['psycopg2']} s vs "
        f"{pub['psycopg2_psycogreen']} s): {gap:.2f}x vs the published {published_gap:.2f}x, "
        f"so the gap {said} (within {REPRODUCED_WITHIN:g}x). Without psycogreen each pg_sleep "
        f"blocks the whole gevent hub, so the database halves run one after another."
    )
    for key, label in (
        ("psycopg/gevent", "psycopg 3 under gevent"),
        ("psycopg2/threads", "psycopg2 under uWSGI threads"),
    ):
        if key in by:
            text += f" {label}: {by[key]['time_taken_s']:.2f} s ({by[key]['x_ideal']:.2f}x ideal)."
    if p.delay_s != 1.0:
        text += f" Delay {p.delay_s:g} s (published 1 s); compared as multiples of the ideal."
    return text


SUMMARY = "uWSGI --gevent with psycopg2 with and without psycogreen, psycopg 3, threads"
