"""An ApacheBench-style client: a fixed number of requests at a fixed concurrency, then stop.

Usage: python -m experiments.abclient URL -n 2000 -c 1000 [--timeout 30] [--deadline 120]
       [--hlog PATH]   -> one JSON object on stdout

Why not the lab's locust load generator: the source experiments used `ab -n N -c C`, whose result
is the wall time for exactly N requests, each on a new TCP connection (HTTP/1.0, no keep-alive),
errors counted and skipped as with `-r`. Locust runs for a duration with keep-alive sessions, so
it cannot give "time taken for tests" and never opens the thousands of short connections that
made the originals need port-range and open-file tuning. This client is gevent-based (one
greenlet per concurrent request) and bounded twice: per request (`--timeout`) and overall
(`--deadline`); requests not finished by the deadline are reported as `unfinished`.

ab's own `-s` is not a per-request bound: ab gives up only when no socket has had any event for that
long, so a connect whose SYNs the server dropped waits out the kernel's retransmissions (1, 3, 7,
15, 31 s with exponential backoff) and still counts. `--connect-timeout` gives the connect its own
bound, so that a caller can leave connects to the kernel as ab does; without it one `--timeout`
covers connect and exchange. Connect times are reported apart (`connect_ms`), because a dropped
SYN shows there and nowhere else.
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

from lab.record.hist import new_histogram, record_ms, summary_ms, write_hlog  # noqa: E402
from loadgen.client.errors import classify_exception  # noqa: E402


def raise_nofile() -> tuple[int, int]:
    """Lift the soft open-file limit to the hard one: each concurrent request holds a socket."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return soft, hard


def classify(exc: BaseException) -> tuple[str, str]:
    """(kind, detail) of a failed request: the kind as the lab's generator classifies it, the
    detail the errno's name (ECONNREFUSED, ...) where there is one, else the exception type."""
    if isinstance(exc, OSError) and exc.errno is not None:
        detail = errno.errorcode.get(exc.errno, str(exc.errno))
    else:
        detail = "timeout" if isinstance(exc, gevent.Timeout) else type(exc).__name__
    return classify_exception(exc), detail


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("-n", type=int, required=True, help="requests in total")
    ap.add_argument("-c", type=int, required=True, help="requests in flight at once")
    ap.add_argument("--timeout", type=float, default=30.0, help="per request, seconds")
    ap.add_argument("--connect-timeout", type=float, help="per connect, seconds (then --timeout)")
    ap.add_argument("--deadline", type=float, default=300.0, help="whole run, seconds")
    ap.add_argument("--expect", default="", help="body the server must answer with")
    ap.add_argument("--hlog", type=Path)
    return ap.parse_args()


class Client:
    """`n` one-shot HTTP/1.0 GETs of one URL; counts outcomes and records ok latencies."""

    def __init__(
        self, url: str, n: int, timeout: float, expect: str, connect_timeout: float | None = None
    ) -> None:
        parts = urlsplit(url)
        self.addr = (parts.hostname or "127.0.0.1", parts.port or 80)
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        self.request = f"GET {target} HTTP/1.0\r\nHost: {parts.netloc}\r\n\r\n".encode()
        self.n, self.timeout, self.expect = n, timeout, expect.encode()
        self.connect_timeout = connect_timeout
        self.hist = new_histogram()
        self.connect_hist = new_histogram()
        self.errors: Counter[str] = Counter()
        self.details: Counter[str] = Counter()
        self.started = self.ok = 0

    def connect(self) -> socket.socket:
        """A new connection; its connect time recorded (a dropped SYN costs whole seconds)."""
        t0 = time.perf_counter()
        s = socket.create_connection(self.addr)
        record_ms(self.connect_hist, (time.perf_counter() - t0) * 1000)
        return s

    def fetch(self) -> tuple[int, bytes]:
        """(status, body) of one request on a new connection."""
        if self.connect_timeout is None:
            with gevent.Timeout(self.timeout), self.connect() as s:
                raw = self.exchange(s)
        else:
            with gevent.Timeout(self.connect_timeout):
                s = self.connect()
            with s, gevent.Timeout(self.timeout):
                raw = self.exchange(s)
        head, _, body = raw.partition(b"\r\n\r\n")
        return (int(head.split(b" ", 2)[1]) if head.startswith(b"HTTP/") else 0), body

    def exchange(self, s: socket.socket) -> bytes:
        """Send the request, read until the server closes (HTTP/1.0)."""
        s.sendall(self.request)
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
        return b"".join(chunks)

    def one(self) -> None:
        t0 = time.perf_counter()
        try:
            status, body = self.fetch()
        except BaseException as exc:  # noqa: BLE001 - every failure is counted by kind
            if isinstance(exc, gevent.GreenletExit):
                raise
            kind, detail = classify(exc)
            self.errors[kind] += 1
            self.details[detail] += 1
            return
        if status >= 400:
            self.errors["http_5xx" if status >= 500 else "http_4xx"] += 1
        elif status != 200 or (self.expect and body != self.expect):
            self.errors["bad_body"] += 1
        else:
            self.ok += 1
            record_ms(self.hist, (time.perf_counter() - t0) * 1000)

    def worker(self) -> None:
        while self.started < self.n:
            self.started += 1
            self.one()


def main() -> None:
    a = parse_args()
    nofile = raise_nofile()
    client = Client(a.url, a.n, a.timeout, a.expect, a.connect_timeout)
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    wall0 = time.time()
    t0 = time.perf_counter()
    workers = [gevent.spawn(client.worker) for _ in range(min(a.c, a.n))]
    gevent.joinall(workers, timeout=a.deadline)
    elapsed = time.perf_counter() - t0
    unfinished = a.n - client.ok - sum(client.errors.values())
    gevent.killall(workers, block=True, timeout=5)
    ru1 = resource.getrusage(resource.RUSAGE_SELF)
    if a.hlog:
        write_hlog(a.hlog, [(wall0, wall0 + elapsed, client.hist)])
    cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    result = {
        "n": a.n,
        "c": a.c,
        "started_at": wall0,
        "time_taken_s": elapsed,
        "deadline_hit": unfinished > 0,
        "ok": client.ok,
        "errors": dict(client.errors),
        "error_details": dict(client.details),
        "unfinished": unfinished,
        "throughput_rps": client.ok / elapsed if elapsed else 0.0,
        "latency_ms": summary_ms(client.hist),
        "connect_ms": summary_ms(client.connect_hist),
        "client_cpu_pct": 100 * cpu / elapsed if elapsed else 0.0,
        "nofile": list(nofile),
    }
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
