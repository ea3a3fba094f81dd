"""oha on generators on other machines: `lab generator --connect` (here on loopback, a process of
its own) runs its share of a step on its own oha and hands its records over after the window;
the step's master merges them with the shares run here by their own times. Each remote share's
records cross as bytes (`loadgen.oha.wire`), checked over generated runs. Skipped, with the
reason, where oha is not installed."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lab.run import engine
from lab.run.generators import Generators
from lab.system import procs
from loadgen.oha import wire
from loadgen.oha.figures import OhaRun
from loadgen.protocol import Done, Start
from tests.helpers import lab_cli
from tests.ohastep import calm, needs_oha, oha_step

__all__ = ["calm"]  # the fixture (tests/ohastep.py)


@pytest.fixture()
def remote(tmp_path: Path) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """`lab generator --steps 1` on loopback: the master's address and the generator."""
    master = f"127.0.0.1:{procs.free_port()}"
    argv = lab_cli("generator", "--connect", master, "--steps", "1", "--log", str(tmp_path / "w"))
    gen = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        yield master, gen
    finally:
        gen.kill()
        gen.wait()


def _with_remote(
    remote: tuple[str, subprocess.Popen[str]], url: str, tmp_path: Path, **kw: Any
) -> Done:
    master, gen = remote
    try:
        done, _ = oha_step(url, tmp_path, remote_generators=1, master=master, **kw)
        output, _ = gen.communicate(timeout=30)
    except (AssertionError, RuntimeError) as e:  # what `lab generator` said, with the failure
        gen.kill()
        raise AssertionError(f"{e}\nlab generator said:\n{gen.communicate()[0]}") from None
    assert gen.returncode == 0 and "served step 1 " in output, output
    return done


@needs_oha
def test_a_remote_generator_runs_its_users_on_its_own_oha(
    calm: str, tmp_path: Path, remote: tuple[str, subprocess.Popen[str]]
) -> None:
    """5 users, 1 process here and 1 remote: 3 and 2 connections, each part's requests its
    own, the whole the exact sum of both."""
    kw = {"rate_rps": None, "max_outstanding": 0, "users": 5, "expected_body": "ok"}
    done = _with_remote(remote, calm, tmp_path, **kw)
    assert [p.source for p in done.parts][0] == "oha-0"
    assert done.parts[1].source == f"remote-1@{socket.gethostname()}"
    assert all(p.requests > 0 and p.ok > 0 for p in done.parts), done.parts
    assert sum(p.ok for p in done.parts) == done.ok and done.errors == {}
    assert done.requests == done.ok + done.closed_loop["unfinished"]
    start = Start("http://127.0.0.1:1", "/", 0.3, 2.0, 5.0, users=5, remote_generators=1)
    said = engine.evidence("oha", engine.applied(start, "oha", Generators()))
    assert said["name"] == "oha" and (said["processes"], said["remote_processes"]) == (1, 1)


@needs_oha
def test_an_open_loop_step_all_on_a_remote_generator_sends_its_rate(
    calm: str, tmp_path: Path, remote: tuple[str, subprocess.Popen[str]]
) -> None:
    """No oha here (an open loop's automatic count may leave none): the remote share sends the
    whole rate, and the step still says when its window opened and each second's figures."""
    done = _with_remote(remote, calm, tmp_path, generators=0, expected_body="ok")
    assert [p.source for p in done.parts] == [f"remote-1@{socket.gethostname()}"]
    assert done.open_loop is not None and done.open_loop.scheduled == 400
    assert done.open_loop.sent >= 396 and done.errors == {}
    assert len(done.timeseries["rps"]) == 2


floats = st.floats(0.0, 1e4, allow_nan=False)
runs = st.builds(
    lambda rows, errors, cpus, source: OhaRun(
        *np.array(rows, dtype=float).reshape(-1, 5).T,
        errors=errors,
        total_s=3.5,
        scheduled=len(rows),
        source=source,
        rate_rps=12.5,
        cpu_pct=40.0,
        cpus=tuple(cpus),
    ),
    st.lists(st.tuples(floats, floats, floats, floats, floats), max_size=20),
    st.dictionaries(st.text(max_size=20), st.integers(0, 10**6), max_size=3),
    st.lists(st.integers(0, 63), max_size=2),
    st.text(max_size=10),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(runs, max_size=3))
def test_records_cross_as_bytes_unchanged_but_for_their_source(given_runs: list[OhaRun]) -> None:
    back = wire.decode(wire.encode(given_runs), "remote-2@host")
    assert len(back) == len(given_runs)
    for k, (a, b) in enumerate(zip(given_runs, back, strict=True)):
        assert b.source == ("remote-2@host" if k == 0 else f"remote-2@host#{k + 1}")
        for name in wire.ARRAYS:
            assert np.array_equal(getattr(a, name), getattr(b, name))
        same = ("errors", "total_s", "scheduled", "rate_rps", "cpu_pct", "cpus")
        assert all(getattr(a, f) == getattr(b, f) for f in same)
