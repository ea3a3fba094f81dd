"""The May 2025 uWSGI row (16,474 RPS at 7.7 ms with 100 ms waits, 128 connections), rebuilt.

The page's version of 21 May 2025 (commit 02f683950c22f962a7cd9c04851c8dd6a3cd1c30) ran its
harness with rewrk, which keeps the time of every request it started, a failed one too, and
counts it. uWSGI's HTTP router answers without Content-Length and closes the connection after
each answer, so a keep-alive client's next request on that connection fails at once. Here the
same argv is probed for that close, then loaded with rewrk as the harness loaded it (primer,
warm-up, then 128 connections); oha's count of 200 answers for the same argv is its own row.
Little's law on the page's own figures says the rest: 128 connections always busy, each exchange
over in 7.7 ms, against one thread that answers at most 10 requests a second.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from experiments.common import Row, RunDir, free_port, serving
from experiments.granian_long_io import clients
from experiments.granian_long_io.cases import Case, Protocol, argv
from experiments.granian_long_io.gaps import PUBLISHED_S, Reading, errors_words, little, verdict

KEY = "may2025_uwsgi"
BODY_END = b"x" * 10  # the end of the route's answer (app.BODY)


def closes_after_answer(port: int, path: str = "/health") -> float | None:
    """Microseconds until a second keep-alive request on one connection fails, where the server
    closed it after its first answer; None where the second one is answered."""
    request = f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\n\r\n".encode()
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(request)
        while (chunk := s.recv(65536)) and BODY_END not in chunk:
            pass
        start = time.perf_counter()
        try:
            s.sendall(request)
            answered = bool(s.recv(65536))
        except OSError:
            answered = False
        return None if answered else round((time.perf_counter() - start) * 1e6, 1)


def measure(p: Protocol, run: RunDir, index: int, case: Case) -> dict[str, Any]:
    """A fresh server with the May 2025 argv: the close probed, then rewrk's primer, warm-up and
    the measured run at the case's connections; {"failed": why} where rewrk cannot run."""
    out: dict[str, Any] = {"case": case.label, "kind": "may2025-rewrk", "index": index}
    why = clients.missing("rewrk")
    port = free_port()
    url = f"http://127.0.0.1:{port}{case.route}"
    try:
        with serving(
            argv(case, port), f"http://127.0.0.1:{port}/health", run.path / "logs/rewrk.log"
        ):
            out["closes_after_answer_us"] = closes_after_answer(port)
            if why is None:
                clients.rewrk(url, p.primer_c, p.primer_s)
                time.sleep(p.pauses_s[0])
                clients.rewrk(url, p.connections, p.warmup_s)
                time.sleep(p.pauses_s[1])
                out |= clients.rewrk(url, case.connections, p.bench_s)
    except Exception as e:  # the row says why
        why = f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"
    if why is not None:
        out["failed"] = why
    out["rewrk"] = clients.version("rewrk")
    run.record(out)
    return out


def explanation(pub: Mapping[str, Any], m: Mapping[str, Any], oha: Reading | None) -> str:
    """Why the page could list 16,474 RPS at 100 ms for one thread, from its own figures and
    from what the same argv does here."""
    f = pub[KEY]["100ms"]
    ceiling = f.get("threads", 1) / 0.1
    said = (
        f"The May 2025 row: {f['rps']:,} RPS at {f['avg_ms']} ms with 128 connections "
        f"({f['total']:,} requests in {PUBLISHED_S:g} s). Little's law: "
        f"{little(f['rps'], f['avg_ms']):,.0f} requests in flight of 128, each exchange over in "
        f"{f['avg_ms']} ms, while one thread waiting 100 ms answers at most {ceiling:g}/s: at "
        f"least {1 - ceiling / f['rps']:.2%} of what was counted were not answers. Its client, "
        "rewrk, counts a failed request as a request, timed until it has reconnected."
    )
    if m.get("closes_after_answer_us") is not None:
        said += (
            " Measured here: uWSGI's HTTP router closes each connection after its one answer "
            f"(no Content-Length), and the next request on it fails in "
            f"{m['closes_after_answer_us']:,.0f} us with no answer."
        )
    if "rps" in m:
        said += (
            f" rewrk against the same argv at 128 connections reports {m['rps']:,.0f} RPS at "
            f"{m['avg_ms']:,.1f} ms: {m['rps'] / ceiling:,.0f}x what one thread can answer."
        )
    if oha is not None:
        said += (
            f" oha, which counts status codes: {oha.ok_rps:,.1f} answers 200/s of "
            f"{oha.rps:,.1f} RPS ({errors_words(oha)})."
        )
    return said


def rows(
    case: Case, m: Mapping[str, Any], oha: Reading | None, pub: Mapping[str, Any]
) -> list[Row]:
    """rewrk's RPS and latency beside the May 2025 page's, and oha's 200-rate for the same argv."""
    f = pub[KEY]["100ms"]
    section = f"{case.label} ({case.server.note})"
    why = explanation(pub, m, oha)
    metrics = (
        ("RPS (rewrk requests_avg: failed requests counted)", "req/s", f["rps"], "rps"),
        ("average latency (rewrk)", "ms", f["avg_ms"], "avg_ms"),
    )
    found = []
    for name, unit, published, key in metrics:
        if "failed" in m:
            found.append(Row.of_failure(section, name, unit, published, m["failed"]))
            continue
        note = f"rewrk: {m['requests']:,} requests counted, slowest {m['max_ms']:,.0f} ms"
        row = Row(section, name, unit, published, round(m[key], 1), note, evidence=dict(m))
        found.append(replace(row, explanation=why) if row.gap() else row)
    if oha is not None:
        found.append(
            Row(
                section,
                "answers 200 per second (oha, same argv)",
                "req/s",
                None,
                round(oha.ok_rps, 1),
                verdict(oha),
            )
        )
    return found
