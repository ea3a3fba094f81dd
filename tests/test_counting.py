"""What the verdict's facts count, counted right (issue 32): connections closed after the
measured window are not the step's (at a step's end every user closes its own keep-alive
connection, and a keep-alive server must not be read as closing one per request for that: 400
users, 750 requests read 0.53 per request), and the server's processes' wait for a CPU is
measured like the apparatus's. Real sockets and processes, counted from the kernel's tables."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import psutil

from lab.system.sampling import HostMeter
from lab.system.tcpconns import ConnectionMeter


def test_closes_after_the_window_are_not_counted() -> None:
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    meter = ConnectionMeter(port)
    meter.clear()
    time.sleep(0.5)  # the close times come from TIME_WAIT timers: a tick or so of slack
    early = [socket.create_connection(("127.0.0.1", port)) for _ in range(3)]
    for s, peer in zip(early, [server.accept()[0] for _ in early], strict=True):
        s.close()  # closed inside the window, the client first (its end keeps the TIME_WAIT)
        peer.close()
    time.sleep(0.3)
    meter.sample()
    window_s = time.monotonic() - meter.since
    time.sleep(0.6)
    late = [socket.create_connection(("127.0.0.1", port)) for _ in range(5)]
    for s, peer in zip(late, [server.accept()[0] for _ in late], strict=True):
        s.close()  # every user's own close at the end: after the window
        peer.close()
    time.sleep(0.1)
    inside, _ = meter.counted(window_s)
    everything, _ = meter.counted()
    server.close()
    assert (inside, everything) == (3, 8)


def test_a_server_that_waits_for_its_core_is_measured_waiting() -> None:
    """A 'server' (its master and a worker) pinned to one core beside two busy loops: it waits
    for the CPU most of the time, and the meter sees it through its worker process."""
    core = min(os.sched_getaffinity(0))
    spin = "import time\nend = time.time() + 20\nwhile time.time() < end: pass"
    child = f"import subprocess, sys\nsubprocess.run([sys.executable, '-c', {spin!r}])"
    pin = ["taskset", "--cpu-list", str(core), sys.executable, "-c"]
    hogs = [subprocess.Popen([*pin, spin]) for _ in range(2)]
    server = subprocess.Popen([*pin, child])
    try:
        time.sleep(0.5)
        meter = HostMeter(server_pid=server.pid)
        meter.clear()
        time.sleep(1.0)
        meter.sample()
    finally:
        for worker in psutil.Process(server.pid).children(recursive=True):
            worker.kill()
        for p in (*hogs, server):
            p.kill()
            p.wait()
    assert meter.server_waited[-1] >= 30, meter.server_waited
