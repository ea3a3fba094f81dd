"""An app that reaches a non-loopback address while it is checked: listed, and no sweep.

The far end is an address inside a network namespace this test creates (10.77.0.1 on the
namespace's own loopback device, with a listener of the test's), never a real outside address:
the whole check runs in that namespace.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from lab.system import outbound
from tests.helpers import flask_app, lab_cli

REMOTE = "10.77.0.1"
REMOTE_PORT = 8080
CALLER_APP = flask_app("""
import os, urllib.request


@app.get("/hello")
def hello():
    return "hello"


@app.get("/call")
def call():
    return urllib.request.urlopen(os.environ["API_URL"] + "/delay", timeout=10).read()
""")
# In a new network namespace: REMOTE on its loopback device, a slow listener there, then each
# `lab run` of argv[2] (a JSON list of argument lists); prints [[exit code, stderr], ...].
IN_NAMESPACE = f"""
import json, subprocess, sys, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from experiments import netns

netns.enter({{}})
subprocess.run(["ip", "addr", "add", "{REMOTE}/32", "dev", "lo"], check=True)


class Slow(BaseHTTPRequestHandler):
    def do_GET(self):
        time.sleep(0.3)
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"remote")

    def log_message(self, *args):
        pass


server = ThreadingHTTPServer(("{REMOTE}", {REMOTE_PORT}), Slow)
threading.Thread(target=server.serve_forever, daemon=True).start()
done = []
for args in json.loads(sys.argv[2]):
    run = subprocess.run(json.loads(sys.argv[1]) + args, capture_output=True, text=True)
    done.append([run.returncode, run.stderr])
print(json.dumps(done))
"""


def in_namespace(runs: list[list[str]]) -> list[tuple[int, str]]:
    probe = subprocess.run(["unshare", "--net", "true"], capture_output=True, check=False)
    if probe.returncode != 0:
        pytest.skip("no private network namespace here (needs root or CAP_SYS_ADMIN)")
    argv = [sys.executable, "-c", IN_NAMESPACE, json.dumps(lab_cli("run")), json.dumps(runs)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=True)
    return [(rc, err) for rc, err in json.loads(done.stdout)]


def test_an_app_calling_a_non_loopback_address_is_refused_until_pointed_at_the_mock(
    tmp_path: Path,
) -> None:
    (tmp_path / "caller.py").write_text(CALLER_APP)
    base = ["--app", "caller:app", "--app-dir", str(tmp_path), "--models", "uwsgi-threads"]
    base += ["--knob", "concurrency=4", "--path", "/hello", "--path", "/call", "--check-only"]
    remote = ["--env", f"API_URL=http://{REMOTE}:{REMOTE_PORT}"]
    refused, mocked, allowed = in_namespace(
        [
            [*base, *remote, "--out", str(tmp_path / "a")],
            [*base, "--env", "API_URL={upstream_url}", "--out", str(tmp_path / "b")],
            [*base, *remote, "--allow-remote", "--out", str(tmp_path / "c")],
        ]
    )
    rc, err = refused
    assert rc == 1 and "connected to non-loopback addresses" in err, err
    assert f"{REMOTE}:{REMOTE_PORT} (tcp): from API_URL=" in err
    assert "--env API_URL={upstream_url}" in err and "Traceback" not in err
    assert mocked[0] == 0, mocked[1]
    assert allowed[0] == 0 and "WARNING" in allowed[1], allowed[1]


@pytest.mark.parametrize(
    ("environ", "named"),
    [
        ({"API_URL": f"http://{REMOTE}:{REMOTE_PORT}/v1"}, ["API_URL"]),
        ({"API": f"{REMOTE}:{REMOTE_PORT}"}, ["API"]),
        ({"API_URL": f"http://api.example.test:{REMOTE_PORT}"}, ["API_URL"]),  # a name: by port
        ({"API_URL": f"http://127.0.0.1:{REMOTE_PORT}"}, []),  # loopback is not it
        ({"API_URL": "http://api.example.test"}, []),  # port 80, not 8080
        ({"HOME": "/root", "PATH": "/usr/bin:/bin"}, []),
    ],
    ids=["url", "host-port", "name-and-port", "loopback", "other-port", "no-address"],
)
def test_the_variable_that_names_a_far_end(environ: dict[str, str], named: list[str]) -> None:
    far = outbound.Remote(REMOTE, REMOTE_PORT, "tcp")
    assert outbound.pointing_at(far, environ) == named


def test_a_database_url_is_pointed_at_the_labs_database() -> None:
    far = outbound.Remote(REMOTE, 5432, "tcp")
    line = outbound.advice(far, {"DATABASE_URL": f"postgresql://me@{REMOTE}/shop"})
    assert "--env DATABASE_URL={postgres_url}" in line
