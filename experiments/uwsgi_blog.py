"""`uwsgi-blog`: uWSGI `--threads N` vs `--gevent N` for a Flask view that sleeps 1 s (iximiuz).

The blog measured ~10.1 s for both at 10/10 (`ab -c 10 -n 100`) and 35.7 s (threads) vs 5.1 s
(gevent) at 1000/1000 (`-n 2000`). Its gevent figure at 10/10 equals the ideal, so its view found
`sleep` patched: the published gevent cases are run with `--gevent-monkey-patch` (late) and the
sleep looked up at call time, as the blog's code imported it inside the view.

On this project's machines the gap has not reproduced as-is, so after the published cases this
runs the variants that decide the outcome, each measured:

- late vs early monkey-patching, with `from time import sleep` at module level (a late patch
  leaves that name bound to the blocking sleep, so the gevent worker serialises);
- listen backlog 100 (uWSGI's default) vs 4096;
- the server on one core (sched_setaffinity; client on the other) vs both cores shared;
- the blog's kernel and machine ("original conditions", `ORIGINAL`), then each of them alone
  against this machine's: a listen-queue cap of 128, SYN retries that back off exponentially,
  server and client on one CPU; and the real ApacheBench as the client where it is installed;
- the published 1000/1000 cases with the server in a container reached through a port published
  on 127.0.0.1, as the blog ran it (`docker run -p 3000:3000`, ab on the host), where a userland
  proxy may take the connects and meet the listen queue itself (lab.backends.published).
- the published 1000/1000 cases behind nginx, the post's production shape: uWSGI on a unix
  socket in its own protocol (`--socket`, no HTTP router) and nginx's `uwsgi_pass` in front, as
  uWSGI's docs deploy it, nginx configured by lab.front.nginx inside the case's namespace.

Every case runs in its own network namespace (experiments/netns_case.py) where the kernel allows
one, so a case can take another machine's TCP settings without changing this host, and the TCP
counters it keeps (what `nstat` shows: ListenOverflows, SYN retransmissions, ...) are its own.

The client is the lab's ab-style client (experiments/abclient.py), bounded per case; like ab, it
leaves connects to the kernel (a dropped SYN is retried after 1, 3, 7, 15, 31 s with exponential
backoff), and bounds each request's exchange by ab's 30 s. A case that hits its deadline is
reported as "more than" with the requests it finished. `--quick` shortens the sleep of the
variants, whose times are then compared as multiples of the ideal (ceil(n / c) x sleep); the
1000/1000 cases the published figures belong to always sleep 1 s and are compared in seconds,
because the kernel's SYN timers, which decide them, do not scale with the sleep.
"""

from __future__ import annotations

import math
import shutil
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from experiments import apachebench
from experiments.common import Reproduction, Row, RunDir, load_published, no_answer, run_child
from experiments.netns_case import PORT, SOCKET, CaseSpec
from experiments.uwsgi_blog_cases import CASES, Case
from experiments.uwsgi_blog_gaps import PUBLISHED_SIZE, conclude, details, explain
from lab.backends.containers import DEFAULT_IMAGE
from lab.record.rundir import RunDir as LabRunDir
from lab.record.step import Sampled, StepKey
from lab.system.resources import CODE_ROOT

MODELS = {
    "uwsgi-threads": "uwsgi --http --master --threads N, Flask app",
    "uwsgi-gevent": "uwsgi --http --master --gevent N with --gevent[-early]-monkey-patch",
    "uwsgi-threads+nginx": "uwsgi --socket (unix) --master --threads N behind nginx uwsgi_pass",
    "uwsgi-gevent+nginx": "uwsgi --socket (unix) --master --gevent N behind nginx uwsgi_pass",
}
# Where the lab image (Dockerfile) keeps uWSGI's virtualenv and the lab's code.
IMAGE_VENV, IMAGE_CODE = "/opt/lab", "/app"
BODY = "Hello, World!"


@dataclass(frozen=True)
class Protocol:
    sleep_s: float = 1.0
    cases: tuple[Case, ...] = CASES
    timeout_s: float = 30.0  # per request once connected (ab's -s)
    connect_timeout_s: float = 130.0  # above the kernel's own (tcp_syn_retries 6: 127 s)
    deadline_s: float = 120.0  # per case
    seconds_sleep_s: float = 1.0  # the sleep of `seconds` cases (the published one)
    seconds_deadline_s: float = 120.0  # per `seconds` case: room for 2x the published 35.7 s
    server_cpus: tuple[int, ...] = (0,)
    client_cpus: tuple[int, ...] = (1,)
    image: str = DEFAULT_IMAGE  # of the `docker` cases (docker/build-image.sh builds it)


PROTOCOLS = {
    "default": Protocol(),
    "quick": Protocol(sleep_s=0.25, deadline_s=15.0, seconds_deadline_s=45.0),
}


def uwsgi_argv(case: Case, port: str) -> list[str]:
    """uWSGI as the case runs it: here on loopback, in the lab image on every address, or behind
    nginx on a unix socket in its own protocol (`--socket`, no HTTP router: uWSGI's docs)."""
    if case.docker:
        exe, venv, code, host = f"{IMAGE_VENV}/bin/uwsgi", IMAGE_VENV, IMAGE_CODE, "0.0.0.0"
    else:
        exe = shutil.which("uwsgi") or str(Path(sys.executable).with_name("uwsgi"))
        venv, code, host = sys.prefix, str(CODE_ROOT), "127.0.0.1"
    bind = ["--socket", SOCKET] if case.front else ["--http", f"{host}:{port}"]
    argv = [
        *[exe, *bind, "--master", "--virtualenv", venv],
        *["--pythonpath", code, "--module", "experiments.uwsgi_blog_app:app"],
        *["--listen", str(case.listen), "--die-on-term", "--need-app", "--no-orphans"],
        "--disable-logging",
    ]
    if case.model == "threads":
        return [*argv, "--threads", str(case.c)]
    patch = "--gevent-early-monkey-patch" if case.patch == "early" else "--gevent-monkey-patch"
    return [*argv, "--gevent", str(case.c), patch]


def cpus(p: Protocol, case: Case) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(server's, client's) CPUs: one shared, one each, or unpinned."""
    if case.shared_cpu:
        return p.server_cpus, p.server_cpus
    return (p.server_cpus, p.client_cpus) if case.one_core else ((), ())


def sleep_of(p: Protocol, case: Case) -> float:
    return p.seconds_sleep_s if case.seconds else p.sleep_s


def spec(p: Protocol, run: RunDir, index: int, case: Case, key: StepKey) -> CaseSpec:
    server_cpus, client_cpus = cpus(p, case)
    return CaseSpec(
        server=tuple(uwsgi_argv(case, PORT)),
        ready_path="/health",
        path="/",
        n=case.n,
        c=case.c,
        timeout_s=p.timeout_s,
        connect_timeout_s=p.connect_timeout_s,
        deadline_s=p.seconds_deadline_s if case.seconds else p.deadline_s,
        log=str(run.path / f"logs/case{index:02d}.log"),
        hlog=str(run.path / LabRunDir.hlog_relpath(key)) if case.client == "lab" else "",
        expect=BODY,
        env={"BLOG_SLEEP_S": str(sleep_of(p, case)), "BLOG_IMPORT": case.lookup},
        settings=dict(case.settings),
        server_cpus=server_cpus,
        client_cpus=client_cpus,
        client=case.client,
        image=p.image if case.docker else "",
        front=case.front,
    )


def measure(
    p: Protocol, run: RunDir, index: int, case: Case, broken: dict[str, str]
) -> dict[str, Any]:
    """One case in its own namespace; {"case", "skipped": why} where it cannot be run here,
    {"case", "failed": why} where its client is broken (`broken`: client -> why, checked before
    the experiment started) or answered nothing."""
    model = f"uwsgi-{case.model}" + (f"+{case.front}" if case.front else "")
    key = StepKey(model, "closed", case.c, None, index)
    if case.client in broken:
        return failed(run, case, index, broken[case.client])
    s = spec(p, run, index, case, key)
    (r,) = run_child("experiments.netns_case", [s.to_json()], s.deadline_s + 120)
    if "failed" in r:
        return failed(run, case, index, r["failed"])
    if "unavailable" in r:
        print(f"uwsgi-blog: skipped {case.name!r}: {r['unavailable']}", file=sys.stderr)
        out = {"case": case.name, "index": index, "skipped": r["unavailable"]}
        run.record(out)
        return out
    lines = Path(s.log).read_text(errors="replace").splitlines()
    queue_full = sum("listen queue" in line for line in lines)
    ideal = math.ceil(case.n / case.c) * sleep_of(p, case)
    out = {
        "case": case.name,
        "index": index,
        **case.__dict__,
        "sleep_s": sleep_of(p, case),
        "server_cpus": list(s.server_cpus),
        "client_cpus": list(s.client_cpus),
        **r,
        "ideal_s": ideal,
        "x_ideal": r["time_taken_s"] / ideal,
        "listen_queue_full_lines": queue_full,
    }
    run.record(out)
    run.ab_step(key, r, Sampled(), evidence(out), histogram=case.client == "lab")
    return failed(run, case, index, why) if (why := no_answer(r)) else out


def failed(run: RunDir, case: Case, index: int, why: str) -> dict[str, Any]:
    print(f"uwsgi-blog: {case.name!r} failed: {why}", file=sys.stderr)
    out = {"case": case.name, "index": index, "failed": why}
    run.record(out)
    return out


def broken_clients(cases: tuple[Case, ...]) -> dict[str, str]:
    """Each client the cases use that cannot run here, and why: checked before any case runs."""
    why = apachebench.missing() if any(c.client == "ab" for c in cases) else None
    return {"ab": why} if why else {}


def evidence(m: dict[str, Any]) -> dict[str, Any]:
    """What a row keeps to back its figure: where and how it ran, the kernel's counters."""
    return {
        "case": m["case"],
        "namespace": m["namespace"],
        "settings": m["settings"],
        "cpus": {"server": list(m["server_cpus"]), "client": list(m["client_cpus"])},
        "client": m["client"],
        "counters": m["counters"],
        "connect_ms": {k: v for k, v in m["connect_ms"].items() if k in ("p50", "p99", "max")},
        "listen_queue_full_lines": m["listen_queue_full_lines"],
        "server_ready_s": m["server_ready_s"],
        **{k: m[k] for k in ("path", "host_counters", "host_settings", "nginx") if k in m},
    }


def shown(m: dict[str, Any]) -> float | str:
    """Seconds, or "more than the deadline" with how many requests finished."""
    if m["deadline_hit"]:
        return f">{m['time_taken_s']:.0f} s ({m['ok']}/{m['n']} ok)"
    return round(m["time_taken_s"], 3)


def note(m: dict[str, Any]) -> str:
    """The row's note: against the ideal, errors, tail, and what the kernel did to the connects."""
    said = (
        f"{m['x_ideal']:.2f}x ideal ({m['ideal_s']:g} s), {sum(m['errors'].values())} errors, "
        f"p99 {m['latency_ms']['p99']:.0f} ms, longest connect {m['connect_ms']['max']:.0f} ms, "
        f"ListenOverflows {m['counters']['ListenOverflows']}, "
        f"SYN retransmits {m['counters']['TCPSynRetrans']}"
    )
    if m.get("ab_aborted"):
        said += f", ab aborted: {m['ab_aborted']}"
    if "nginx" in m:
        front = m["nginx"]
        said += f", behind nginx (backlog {front['backlog']}), nginx errors x{front['error_lines']}"
    if m["listen_queue_full_lines"]:
        said += f", uWSGI 'listen queue full' x{m['listen_queue_full_lines']}"
    if "path" in m:
        said += (
            f", via {m['path']['path']}, host SYN retransmits {m['host_counters']['TCPSynRetrans']}"
        )
    return said


def row(p: Protocol, case: Case, m: dict[str, Any], published: float | None) -> Row:
    """Seconds beside seconds, or (a variant at a shortened sleep) multiples of the ideal."""
    unit = "s" if case.seconds or p.sleep_s == 1.0 else "x ideal"
    if "failed" in m:
        return Row.of_failure(case.name, "time taken for tests", unit, published, m["failed"])
    if "skipped" in m:
        return Row(case.name, "time taken for tests", unit, published, f"skipped: {m['skipped']}")
    if case.seconds or p.sleep_s == 1.0:
        return Row(
            case.name,
            "time taken for tests",
            "s",
            published,
            shown(m),
            note(m),
            evidence=evidence(m),
        )
    c, n = PUBLISHED_SIZE.get(case.published, (case.c, case.n))
    ideal_pub = math.ceil(n / c) * 1.0  # the blog's ideal: ceil(n/c) x 1 s
    metric = f"time / ideal (sleep {p.sleep_s:g} s" + (
        f"; published {published} s)" if published else ")"
    )
    return Row(
        case.name,
        metric,
        "x ideal",
        round(published / ideal_pub, 3) if published else None,
        round(m["x_ideal"], 3) if not m["deadline_hit"] else shown(m),
        note(m),
        evidence=evidence(m),
    )


def run(p: Protocol, run: RunDir) -> Reproduction:
    pub = load_published("uwsgi_blog")["figures"]
    broken = broken_clients(p.cases)
    results = [measure(p, run, i, case, broken) for i, case in enumerate(p.cases, 1)]
    rows = [
        row(p, case, m, pub.get(case.published) if case.published else None)
        for case, m in zip(p.cases, results, strict=True)
    ]
    measured = {m["case"]: m for m in results if "skipped" not in m and "failed" not in m}
    rows = [replace(r, explanation=explain(r, measured, pub)) if r.gap() else r for r in rows]
    return Reproduction(rows, conclude(p.sleep_s, measured, pub), [], {"cases": details(results)})


SUMMARY = "uWSGI --threads vs --gevent for a 1 s Flask view, and the variants that decide it"


def scaled_cases(divisor: int, cases: tuple[Case, ...] = CASES) -> tuple[Case, ...]:
    """The cases with c and n divided by `divisor` (test sizes); uWSGI needs --gevent >= 2."""
    return tuple(replace(c, c=max(c.c // divisor, 2), n=max(c.n // divisor, 4)) for c in cases)
