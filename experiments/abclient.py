"""An ApacheBench-style client: a fixed number of requests at a fixed concurrency, then stop.

Usage: python -m experiments.abclient URL -n 2000 -c 1000 [--timeout 30] [--deadline 120]
       [--hlog PATH]   -> one JSON object on stdout

Why not the lab's locust load generator: the source experiments used `ab -n N -c C`, whose result
is the wall time for exactly N requests, each on a new TCP connection (HTTP/1.0, no keep-alive),
errors counted and skipped as with `-r`. Locust runs for a duration with keep-alive sessions, so
it cannot give "time taken for tests" and never opens the thousands of short connections that
made the originals need port-range and open-file tuning. This client is gevent-based (one
greenlet per concurrent request) and bounded twice: per request (`--timeout`, like ab's `-s`) and
overall (`--deadline`); requests not finished by the deadline are reported as `unfinished`.
"""

from gevent import monkey

monkey.patch_all()

import argparse  # noqa: E402
import errno  # noqa: E402
import json  # noqa: E402
import resource  # noqa: E402
import socket  # noqa: E402
import time  # noqa: E402
from collections import Counter  # noqa: E402
from pathlib import Path  # noqa: E402
from urllib.parse import urlsplit  # noqa: E402

import gevent  # noqa: E402

from loadgen.hist import new_histogram, record_ms, summary_ms, write_hlog  # noqa: E402

ERRNO_KINDS = {
    errno.ECONNREFUSED: "refused",
    errno.ECONNRESET: "reset",
    errno.EPIPE: "reset",
    errno.ETIMEDOUT: "timeout",
}


def raise_nofile() -> tuple[int, int]:
    """Lift the soft open-file limit to the hard one: each concurrent request holds a socket."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return soft, hard


def classify(exc: BaseException) -> tuple[str, str]:
    """(kind from lab.records.ERROR_KINDS, detail) for a failed request."""
    if isinstance(exc, gevent.Timeout | TimeoutError | socket.timeout):
        return "timeout", "timeout"
    if isinstance(exc, OSError) and exc.errno is not None:
        return ERRNO_KINDS.get(exc.errno, "other"), errno.errorcode.get(exc.errno, str(exc.errno))
    return "other", type(exc).__name__


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("-n", type=int, required=True, help="requests in total")
    ap.add_argument("-c", type=int, required=True, help="requests in flight at once")
    ap.add_argument("--timeout", type=float, default=30.0, help="per request, seconds (ab -s)")
    ap.add_argument("--deadline", type=float, default=300.0, help="whole run, seconds")
    ap.add_argument("--expect", default="", help="body the server must answer with")
    ap.add_argument("--hlog", type=Path)
    a = ap.parse_args()
    nofile = raise_nofile()
    parts = urlsplit(a.url)
    addr = (parts.hostname or "127.0.0.1", parts.port or 80)
    target = parts.path + (f"?{parts.query}" if parts.query else "")
    request = f"GET {target} HTTP/1.0\r\nHost: {parts.netloc}\r\n\r\n".encode()
    expect = a.expect.encode()
    hist = new_histogram()
    errors: Counter[str] = Counter()
    details: Counter[str] = Counter()
    started = ok = 0

    def one() -> None:
        nonlocal ok
        t0 = time.perf_counter()
        try:
            with gevent.Timeout(a.timeout), socket.create_connection(addr) as s:
                s.sendall(request)
                chunks = []
                while chunk := s.recv(65536):
                    chunks.append(chunk)
            head, _, body = b"".join(chunks).partition(b"\r\n\r\n")
            status = int(head.split(b" ", 2)[1]) if head.startswith(b"HTTP/") else 0
        except BaseException as exc:  # noqa: BLE001 - every failure is counted by kind
            if isinstance(exc, gevent.GreenletExit):
                raise
            kind, detail = classify(exc)
            errors[kind] += 1
            details[detail] += 1
            return
        if status >= 400:
            errors["http_5xx" if status >= 500 else "http_4xx"] += 1
        elif status != 200 or (expect and body != expect):
            errors["bad_body"] += 1
        else:
            ok += 1
            record_ms(hist, (time.perf_counter() - t0) * 1000)

    def worker() -> None:
        nonlocal started
        while started < a.n:
            started += 1
            one()

    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    wall0 = time.time()
    t0 = time.perf_counter()
    workers = [gevent.spawn(worker) for _ in range(min(a.c, a.n))]
    gevent.joinall(workers, timeout=a.deadline)
    elapsed = time.perf_counter() - t0
    unfinished = a.n - ok - sum(errors.values())
    gevent.killall(workers, block=True, timeout=5)
    ru1 = resource.getrusage(resource.RUSAGE_SELF)
    if a.hlog:
        write_hlog(a.hlog, [(wall0, wall0 + elapsed, hist)])
    cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    print(
        json.dumps(
            {
                "n": a.n,
                "c": a.c,
                "started_at": wall0,
                "time_taken_s": elapsed,
                "deadline_hit": unfinished > 0,
                "ok": ok,
                "errors": dict(errors),
                "error_details": dict(details),
                "unfinished": unfinished,
                "throughput_rps": ok / elapsed if elapsed else 0.0,
                "latency_ms": summary_ms(hist),
                "client_cpu_pct": 100 * cpu / elapsed if elapsed else 0.0,
                "nofile": list(nofile),
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
