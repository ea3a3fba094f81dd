"""Servers the generator tests aim at, on loopback: a server that sheds load
(`tests.shedding_server`, started as its own process) and one that answers, then freezes.
Shared by tests/test_every_request.py, tests/test_stalls.py and tests/test_oha_engine.py.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path

import psutil

from lab.system import procs
from tests.helpers import QuietHandler

ROOT = Path(__file__).resolve().parent.parent


def shedder(limit: int, delay_ms: int) -> Iterator[str]:
    """A fixture's body: `tests.shedding_server` (holding `limit` requests for `delay_ms` each,
    503 beyond) started on a free port, its URL once it listens; killed after."""
    port = procs.free_port()
    argv = [sys.executable, "-m", "tests.shedding_server", str(port), str(limit), str(delay_ms)]
    proc = subprocess.Popen(argv, cwd=ROOT)
    try:
        deadline = time.monotonic() + 10
        while not _listening(port) and time.monotonic() < deadline:
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.kill()
        proc.wait()


def _listening(port: int) -> bool:
    return any(c.laddr.port == port for c in psutil.net_connections("tcp4") if c.status == "LISTEN")


class Freezing(QuietHandler):
    """Answers at once for FREEZE_AFTER_S after its first request (the settle, then half the
    window), then holds every request longer than a test."""

    first: list[float] = []
    FREEZE_AFTER_S = 0.3 + 0.5

    def do_GET(self) -> None:
        if not self.first:
            self.first.append(time.monotonic())
        if time.monotonic() - self.first[0] >= self.FREEZE_AFTER_S:
            time.sleep(30)
        self.answer(b"ok")


@contextlib.contextmanager
def frozen_later(handler: type[Freezing]) -> Iterator[str]:
    """`handler` (a Freezing) served on a free loopback port, its clock reset; its URL."""
    handler.first.clear()
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
