"""A real app that pauses: every `EVERY` seconds it stops answering for `PAUSE` seconds.

Why: a pause of a fraction of a second (a GC, a lock held, a blocking call in an event loop)
leaves no whole second empty, so only the answers' own timing per 100 ms shows it
(`lab.verdict.pauses`). Two servers, the two ways it happens:

- `gevent`: a gevent stream server, each request waiting 10 ms cooperatively; the pause is a
  blocking `time.sleep` (not monkey-patched) in a request: the whole event loop stops.
- `threads`: the standard library's threaded server, each request 10 ms; the pause is a lock
  every handler takes, held by a background thread (a convoy behind one lock).

The first pause starts `FIRST` seconds after the first request, then one every `EVERY` seconds;
`SERVICE` seconds a request, where not 10 ms (a few users' bins too thin to see a pause).
Run: python -m tests.pausing_server KIND PORT PAUSE EVERY FIRST SERVICE (loopback only).
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from lab.record.step import StepKey, StepRecord, step_record
from lab.verdict.assess import assessed
from lab.verdict.capacity import Capacity
from loadgen.protocol import Start

SERVICE_S = 0.010
SETTLE_S = 0.3
OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: text/plain\r\n\r\nok"


def _gevent(port: int, pause_s: float, every_s: float, first_s: float, service_s: float) -> None:
    import gevent
    from gevent.server import StreamServer

    due: list[float] = []

    def serve(sock: Any, _: Any) -> None:
        """Keep-alive: each request read, waited on cooperatively, answered in one write."""
        reader = sock.makefile("rb")
        while _request(reader):
            now = time.monotonic()
            if not due:
                due.append(now + first_s)
            if now >= due[0]:
                due[0] += every_s
                time.sleep(pause_s)  # blocking: the loop stops, every request with it
            gevent.sleep(service_s)
            sock.sendall(OK)

    StreamServer(("127.0.0.1", port), serve).serve_forever()


def _request(reader: Any) -> bool:
    """Read one request's head (GET: no body); False when the client closed."""
    while (line := reader.readline()) not in (b"\r\n", b"\n"):
        if not line:
            return False
    return True


def _threads(port: int, pause_s: float, every_s: float, first_s: float, service_s: float) -> None:
    lock = threading.Lock()
    started = threading.Event()

    def holder() -> None:
        started.wait()
        time.sleep(first_s)
        while True:
            with lock:
                time.sleep(pause_s)
            time.sleep(every_s - pause_s)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            started.set()
            with lock:
                pass
            time.sleep(service_s)
            self.wfile.write(OK)  # one segment: headers and body written apart wait on Nagle

        def log_message(self, *_: object) -> None:
            pass

    threading.Thread(target=holder, daemon=True).start()
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    server.serve_forever()


def paused_record(
    kind: str,
    pause_s: float,
    every_s: float,
    window_s: float,
    log_dir: Path,
    service_s: float = SERVICE_S,
    **load: Any,
) -> StepRecord:
    """One step against this server, started in a process of its own (its first pause 0.5 s
    into the window), assessed as the lab assesses a step whose requests take `service_s`:
    closed loop of 8 users on the lab's generator, or what `load` asks (`Start`'s fields: a few
    users, an open loop on oha, `engine="oha", rate_rps=..., max_outstanding=...`)."""
    from lab.run.generator import measured_from, run_step
    from lab.system.procs import free_port

    port = free_port()
    first = SETTLE_S + 0.5
    argv = [sys.executable, "-m", "tests.pausing_server", kind, str(port)]
    argv += [str(pause_s), str(every_s), str(first), str(service_s)]
    server = subprocess.Popen(argv, cwd=Path(__file__).parent.parent)
    try:
        _wait_listening(port)
        load = load or {"users": 8}
        start = Start(f"http://127.0.0.1:{port}", "/", SETTLE_S, window_s, 12.0, **load)
        done = run_step(start, log_dir / f"{kind}-{pause_s:g}.log")
    finally:
        server.kill()
        server.wait(timeout=10)
    rate = load.get("rate_rps")
    key = StepKey(kind, "open" if rate else "closed", load.get("users"), rate, 1)
    record = step_record(
        "run", key, measured_from(done), max_outstanding=load.get("max_outstanding")
    )
    return assessed(record, Capacity(1000, "1000 threads", 1.0, service_s * 1000, 64_000))


def _wait_listening(port: int) -> None:
    """Until the port accepts (a TCP connect only: a request would start the server's clock)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.05)
    raise TimeoutError(f"the pausing server did not listen on {port}")


if __name__ == "__main__":
    kind, port, pause, every, first, service = sys.argv[1:7]
    serve = _gevent if kind == "gevent" else _threads
    serve(int(port), float(pause), float(every), float(first), float(service))
