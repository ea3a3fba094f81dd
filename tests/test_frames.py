"""The lab page's "Where the time goes" (lab.webui.frames): a few seconds of py-spy on a real busy
process, read into the owners and top packages a profiled step keeps, natively and through a
model container's meter (`GET /profile?seconds=S`), with a bad request refused in one line."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from lab.record.errors import LabError
from lab.system import procs
from lab.webui import frames
from tests.helpers import wait_answer

# A process that spends its time in one function of its own module, as an app's view would.
BUSY = """
import time

def crunch():
    x = 0
    for i in range(200_000):
        x += i * i
    return x

while True:
    crunch()
    time.sleep(0.001)
"""


@pytest.mark.parametrize(
    ("text", "seconds"), [(None, frames.DEFAULT_SECONDS), ("", 3.0), ("2.5", 2.5), ("10", 10.0)]
)
def test_the_seconds_asked_default_and_parse(text: str | None, seconds: float) -> None:
    assert frames.seconds_asked(text) == seconds


@pytest.mark.parametrize("text", ["0", "-1", "11", "x", "nan"], ids=str)
def test_seconds_it_will_not_take_are_refused_in_one_line(text: str) -> None:
    with pytest.raises(LabError) as caught:
        frames.seconds_asked(text)
    assert f"seconds={text}" in str(caught.value) and "\n" not in str(caught.value)


def test_a_denied_read_names_the_capability_to_give() -> None:
    said = frames._problem("py-spy wall: Permission Denied: Try running again with elevated")
    assert "cap_add: [SYS_PTRACE]" in said
    assert frames._problem("py-spy not installed (pip install py-spy)").endswith("py-spy)")


@pytest.fixture()
def busy(tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    (tmp_path / "busyapp.py").write_text(BUSY)
    proc = subprocess.Popen([sys.executable, str(tmp_path / "busyapp.py")])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_a_busy_process_is_sampled_and_its_own_code_named(busy: subprocess.Popen[bytes]) -> None:
    found = frames.sample(busy.pid, 1.5)
    assert "problem" not in found, found
    assert found["samples"]["busy"] > 0 and found["cpu_top"], found
    assert found["cpu_top"][0]["package"] == "busyapp", found["cpu_top"]
    assert "busyapp" in found["said"]


def test_the_meter_answers_where_the_time_goes(busy: subprocess.Popen[bytes]) -> None:
    port = procs.free_port()
    argv = [sys.executable, "-m", "lab.webui.meter", "--pid", str(busy.pid), "--port", str(port)]
    meter = subprocess.Popen(argv)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_answer(base + "/", meter)
        with urllib.request.urlopen(base + "/profile?seconds=1", timeout=30) as reply:
            found = json.load(reply)
        assert found["cpu_top"][0]["package"] == "busyapp", found
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(base + "/profile?seconds=99", timeout=10)
        assert refused.value.code == 400
        assert "at most 10" in json.load(refused.value)["problem"]
        with urllib.request.urlopen(base + "/", timeout=10) as reply:  # its CPU, as before
            assert "cpu_s" in json.load(reply)
    finally:
        meter.kill()
        meter.wait(timeout=10)
