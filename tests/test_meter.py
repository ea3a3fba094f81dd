"""`lab serve --meter-port`: a real server with its meter beside it, read as the lab page reads it.

The meter is how the lab page under Compose sees each container's server CPU and RSS without a
Docker socket; here the same command runs natively, so the test needs no Docker.
"""

from __future__ import annotations

import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import pytest

from lab.system import procs
from lab.system.procstats import RemoteMeter, meters
from lab.system.sampling import TreeMeter
from tests.helpers import wait_answer

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture()
def served(upstream) -> Iterator[tuple[subprocess.Popen[bytes], str, int]]:  # noqa: ANN001
    """`lab serve gunicorn-gevent` with a meter; killed afterwards."""
    port, meter_port = procs.free_port(), procs.free_port()
    argv = [
        *(sys.executable, "-m", "lab.cli.serve", "gunicorn-gevent"),
        *("--host", "127.0.0.1", "--port", str(port), "--meter-port", str(meter_port)),
        *("--knob", "concurrency=20", "--upstream-url", upstream.url),
    ]
    proc = subprocess.Popen(argv, cwd=ROOT, stderr=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_answer(url + "/health", proc)
        yield proc, url, meter_port
    finally:
        procs.stop_group(proc.pid, 10, proc.wait)
        proc.wait(timeout=30)


def test_meter_reads_the_servers_cpu_and_rss_from_outside_its_tree(served) -> None:  # noqa: ANN001
    proc, url, meter_port = served
    meter_url = f"http://127.0.0.1:{meter_port}/"
    wait_answer(meter_url, proc)
    meter = RemoteMeter(meter_url)
    with ThreadPoolExecutor(8) as pool:  # some load, so the server spends CPU
        list(pool.map(lambda _: urllib.request.urlopen(url + "/io?delay_ms=5").read(), range(200)))
    now = meter.sample()
    assert now.cpu_pct > 0 and now.rss_mb > 10 and 0 < now.pss_mb <= now.rss_mb
    (server,) = [c for c in psutil.Process(proc.pid).children() if "gunicorn" in c.cmdline()[1]]
    server_tree = {server.pid, *(c.pid for c in server.children(recursive=True))}
    meter_pids = [p.pid for p in psutil.process_iter(["cmdline"]) if _is_meter(p, meter_port)]
    assert meter_pids and not set(meter_pids) & server_tree  # its own use is never counted
    assert f"--pid {server.pid}" in " ".join(psutil.Process(meter_pids[0]).cmdline())
    conns = psutil.Process(meter_pids[0]).net_connections("tcp")
    (listening,) = [c.laddr for c in conns if c.status == psutil.CONN_LISTEN]
    assert listening == ("127.0.0.1", meter_port)  # the server's address: loopback by default


def test_lab_page_finds_the_meter_from_the_models_url(served, monkeypatch) -> None:  # noqa: ANN001
    _, url, meter_port = served
    monkeypatch.setenv("LAB_METER_PORT", str(meter_port))
    found = meters({"gunicorn-gevent": url, "uwsgi-gevent": "http://[::1]:1"})
    assert list(found) == ["gunicorn-gevent"]  # a model without a meter shows no figures
    assert found["gunicorn-gevent"].sample().pss_mb > 10


def test_meter_exits_when_the_server_is_gone(served) -> None:  # noqa: ANN001
    proc, _, meter_port = served
    wait_answer(f"http://127.0.0.1:{meter_port}/", proc)
    (meter,) = [p for p in psutil.process_iter(["cmdline"]) if _is_meter(p, meter_port)]
    procs.stop_group(proc.pid, 10, proc.wait)
    proc.wait(timeout=30)
    meter.wait(timeout=10)  # psutil raises TimeoutExpired if it is still running


def _is_meter(p: psutil.Process, port: int) -> bool:
    cmdline = p.info["cmdline"] or []
    return "lab.webui.meter" in cmdline and str(port) in cmdline


def test_a_forked_tree_counts_its_shared_pages_once_in_pss() -> None:
    """A master that filled 64 MB and forked three workers: summed RSS counts those pages four
    times, PSS summed once (the figure models are compared on)."""
    code = (
        "import os, time\n"
        "shared = bytearray(os.urandom(64 * 2**20))\n"
        "for _ in range(3):\n"
        "    if os.fork() == 0:\n"
        "        time.sleep(30); os._exit(0)\n"
        "print('ready', flush=True); time.sleep(30)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, start_new_session=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        now = TreeMeter(proc.pid).sample()
    finally:
        procs.stop_group(proc.pid, 5, proc.wait)
    assert now.rss_mb > 4 * 64 and now.pss_mb < 64 + 3 * 20, now


def test_lab_serve_exec_becomes_the_server_alone(upstream, tmp_path: Path) -> None:  # noqa: ANN001
    """`--exec` (the Docker backend's containers): the command's own process is the server, so a
    container's stats are the server's alone; with a meter or a front it is refused."""
    port = procs.free_port()
    argv = [*(sys.executable, "-m", "lab.cli.serve", "gunicorn-gevent", "--exec")]
    argv += ["--port", str(port), "--upstream-url", upstream.url]
    proc = subprocess.Popen(argv, cwd=ROOT, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_answer(f"http://127.0.0.1:{port}/health", proc)
        assert "gunicorn" in " ".join(psutil.Process(proc.pid).cmdline())
    finally:
        procs.stop_group(proc.pid, 10, proc.wait)
    refused = subprocess.run(
        [*argv[:5], "--meter-port", "1"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert refused.returncode == 2 and "--exec" in refused.stderr
