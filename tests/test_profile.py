"""The server's sampled stacks (issue 57): grouped by owner, every sample counted once, and the
calls that block an event loop named, on generated stacks and on a real server under load."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from xml.etree import ElementTree

import pytest
from hypothesis import given
from hypothesis import strategies as st

from analysis.profiles import flame
from analysis.report import write_report
from lab.record import stacks as kept
from lab.record.step import Raised, amended
from lab.system import procs, profile
from lab.verdict import owners
from lab.verdict.assess import assessed
from lab.verdict.capacity import Capacity
from tests.fixture_run import closed_step
from tests.helpers import lab_run, step_rows, wait_answer

LOOP = 'process 10:"python -m uvicorn app"'
FRAMES = (
    "<module> (app.py)",
    "run (asyncio/runners.py)",
    "BaseEventLoop._run_once (asyncio/base_events.py)",
    "EpollSelector.select (selectors.py)",
    "handler (shop/views.py)",
    "Template.render (jinja2/environment.py)",
    "connect (psycopg2/__init__.py)",
    "dumps (json/__init__.py)",
    "Flask.wsgi_app (flask/app.py)",
    "Thread._bootstrap (threading.py)",
)


@pytest.mark.parametrize(
    ("frame", "pkg", "name"),
    [
        ("connect (psycopg2/__init__.py)", "psycopg2", "psycopg2.connect"),
        ("Template.render (jinja2/environment.py:12)", "jinja2", "jinja2.environment.render"),
        ("Hub.run (gevent/hub.py)", "gevent", "gevent.hub.run"),
        ("dumps (json/__init__.py)", "json", "json.dumps"),
        ("sleepy (/work/x/tests/profileapp/__init__.py)", "profileapp", "tests.profileapp.sleepy"),
        ("<native> (uwsgi)", "uwsgi", "uwsgi.<native>"),
    ],
    ids=["driver", "framework", "gevent-hub", "stdlib", "absolute-app-path", "uwsgi-c-loop"],
)
def test_a_frame_names_its_package_and_its_call(frame: str, pkg: str, name: str) -> None:
    assert owners.package(frame) == pkg
    assert owners.name(frame) == name


# Each package of the frames above and its owner: the owner follows from the package alone.
PACKAGE_OWNERS = {
    "psycopg2": "driver",
    "jinja2": "framework",
    "gevent": "server",
    "json": "interpreter",
    "profileapp": "app",
    "uwsgi": "server",
}


@pytest.mark.parametrize(("pkg", "owner"), PACKAGE_OWNERS.items(), ids=list(PACKAGE_OWNERS))
def test_a_package_has_its_owner(pkg: str, owner: str) -> None:
    assert owners.owner(pkg) == owner


stacks = st.dictionaries(
    st.lists(st.sampled_from(FRAMES), min_size=0, max_size=5).map(lambda f: ";".join([LOOP, *f])),
    st.integers(1, 500),
    max_size=12,
)


@given(busy=stacks, extra_idle=st.integers(0, 2000))
def test_every_sample_is_counted_once_and_the_shares_sum_to_100(
    busy: dict[str, int], extra_idle: int
) -> None:
    """The busy samples by package and by owner add up to all of them; the idle ones are the
    wall recorder's beyond the busy; the percentages sum to 100 (to their rounding)."""
    total = sum(busy.values())
    assert sum(owners.by_package(busy).values()) == total
    counted = owners.by_owner(busy, total + extra_idle)
    assert sum(counted.values()) == total + extra_idle
    assert counted["idle"] == extra_idle
    shares = owners.percent(counted)
    assert not shares or abs(sum(shares.values()) - 100) <= 0.05 * len(shares)


def test_a_call_waiting_on_the_loop_thread_is_blocking_and_a_computing_one_is_not() -> None:
    base = f"{LOOP};<module> (app.py);run (asyncio/runners.py)"
    wall = Counter(
        {
            f"{base};EpollSelector.select (selectors.py)": 100,  # the loop idle
            f"{base};connect (psycopg2/__init__.py)": 60,  # waiting in the driver
            f"{base};dumps (json/__init__.py)": 40,  # computing
            f"{LOOP};Thread._bootstrap (threading.py);work (pool.py)": 80,  # a pool's thread
        }
    )
    busy = Counter({f"{base};dumps (json/__init__.py)": 39})
    found = owners.blocking(wall, busy)
    assert [b["caller"] for b in found] == ["psycopg2.connect"]
    assert found[0]["share_pct"] == 30.0  # 60 of the loop thread's 200 samples
    words = owners.said({"cpu_top": [], "blocking": found}, "unknown")
    assert "psycopg2.connect blocks the loop 30% of the window: psycogreen" in words


def _load(url: str, seconds: float, users: int = 4) -> None:
    """Bounded load: `users` threads, each requesting until `seconds` pass."""
    deadline = time.monotonic() + seconds

    def user() -> None:
        while time.monotonic() < deadline:
            with urllib.request.urlopen(url, timeout=5) as r:
                r.read()

    threads = [threading.Thread(target=user) for _ in range(users)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(seconds + 10)


@pytest.fixture(scope="module")
def uvicorn_app() -> Iterator[tuple[str, int]]:
    """uvicorn serving the profiler's real cases: its URL and pid."""
    port = procs.free_port()
    argv = [sys.executable, "-m", "uvicorn", "--host", "127.0.0.1", "--port", str(port)]
    argv += ["--workers", "1", "--log-level", "warning", "tests.profileapp:app"]
    popen = subprocess.Popen(argv, cwd=Path(__file__).parent.parent)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_answer(f"{url}/json", popen)
        yield url, popen.pid
    finally:
        popen.terminate()
        popen.wait(10)


@pytest.mark.parametrize(
    ("route", "blocks"),
    [("/sleep", True), ("/json", False)],
    ids=["time-sleep-in-async-handler-blocks", "cpu-bound-json-does-not"],
)
def test_a_real_asyncio_server_profiled_under_load(
    uvicorn_app: tuple[str, int], route: str, blocks: bool, tmp_path: Path
) -> None:
    """uvicorn (its --workers 1 master and worker) sampled for 3 s of load: the sleeping handler
    is named with its share of the loop's window; the JSON handler computes and is not."""
    url, pid = uvicorn_app
    profiler = profile.Profiler(pid, tmp_path / "step")
    profiler.start()
    time.sleep(0.5)  # py-spy attached
    _load(url + route, seconds=3.0)
    stacks = profiler.stop()
    assert stacks is not None, profiler.problem
    assert kept.read(kept.stacks_path(tmp_path / "step", "wall")) == stacks.wall
    summary = owners.summary(stacks.wall, stacks.busy)
    callers = [b["caller"] for b in summary["blocking"]]
    assert any(c.endswith("profileapp.sleepy") for c in callers) is blocks, summary
    assert abs(sum(summary["owners_pct"].values()) - 100) < 1
    if not blocks:
        assert summary["cpu_top"][0]["package"] in {"json", "profileapp", "uvicorn", "asyncio"}


@given(busy=stacks)
def test_the_flame_graph_is_one_svg_whose_rows_hold_every_sample(busy: dict[str, int]) -> None:
    """The graph parses as SVG; its bottom row (the process) spans the width: every sample."""
    drawn = flame.svg(busy)
    if not busy:
        assert drawn == ""
        return
    root = ElementTree.fromstring(drawn)
    ns = "{http://www.w3.org/2000/svg}"
    rects = root.iter(f"{ns}rect")
    bottom = [r for r in rects if float(r.get("y", -1)) == float(root.get("height", 0)) - 16]
    width = sum(float(r.get("width", 0)) + 0.5 for r in bottom)
    assert abs(width - flame.WIDTH) < 1
    assert "<script" not in drawn and "http://" not in drawn.replace(ns[1:-1], "")


@pytest.mark.parametrize(
    ("driver", "blocks"),
    [("psycopg2", True), ("psycopg2-green", False)],
    ids=["psycopg2-without-psycogreen-blocks", "psycopg2-with-psycogreen-does-not"],
)
def test_the_labs_psycopg2_route_under_gevent_names_its_blocking_call(
    driver: str, blocks: bool, tmp_path: Path
) -> None:
    """The lab's own /db route on gunicorn-gevent, a real PostgreSQL, one short step profiled:
    psycopg2 as is holds the hub in its C call, named by its caller in the reason; made
    cooperative by psycogreen, the worker waits in the hub and nothing is named."""
    args = ["--models", "gunicorn-gevent", "--route", "db", "--db-driver", driver]
    args += ["--levels", "10", "--duration", "3", "--warmup", "1", "--profile", "all"]
    run, _ = lab_run(tmp_path, *args)
    (step,) = step_rows(run)
    found = step["details"]["profile"]["blocking"]
    named = "servers.dbclient.pg_sleep blocks the loop" in step["limit_reason"]
    assert named is blocks and bool(found) is blocks, step["details"]["profile"]
    if blocks:
        assert found[0]["share_pct"] >= 50, found
    page = write_report(run).read_text()  # the flame graph drawn, nothing fetched
    assert "Where the server's CPU went" in page and "<svg" in page and "<script" not in page


PROFILE = {
    "owners_pct": {"app": 10.0, "framework": 41.0, "driver": 18.0, "idle": 31.0},
    "cpu_top": [
        {"package": "jinja2", "owner": "framework", "pct": 59.4},
        {"package": "psycopg2", "owner": "driver", "pct": 26.1},
        {"package": "flask", "owner": "framework", "pct": 2.0},
    ],
    "blocking": [],
}


@pytest.mark.parametrize(
    ("cpu", "limit", "says"),
    [(99.0, "server_cpu", True), (20.0, "unknown", True), (99.0, "apparatus", False)],
    ids=["server-cpu-says-where", "not-found-says-where", "apparatus-does-not"],
)
def test_the_reason_says_where_the_cpu_went_where_the_limit_is_the_server(
    cpu: float, limit: str, says: bool
) -> None:
    """A hand-built step with a profile in its evidence, assessed by the real table: the CPU's
    top packages (5% and up) follow the reason where the server's CPU or nothing named the limit."""
    cap = Capacity(1000, "1000 threads x 1 process", cores=1.0, delay_ms=10.0, memory_mb=64_000)
    raised = (Raised("client_saturated", "generator CPU 98% of its core"),)
    r = closed_step(50, 3000 if limit != "unknown" else 900, cap, p50=12, cpu=cpu)
    if limit == "apparatus":
        r = closed_step(50, 3000, cap, p50=12, cpu=20.0, raised=raised)
    r = assessed(amended(r, details={**r.evidence.details, "profile": PROFILE}), cap)
    assert r.evidence.limited_by == limit, r.evidence.limit_reason
    words = "where the server's CPU went: 59% in jinja2 (framework), 26% in psycopg2 (driver)"
    assert (words in r.evidence.limit_reason) is says, r.evidence.limit_reason
    assert "flask" not in r.evidence.limit_reason


GRANIAN = 'process 5:"/v/bin/python /v/bin/granian --interface wsgi"'


@pytest.mark.parametrize(
    ("stack", "pkg"),
    [
        ('process 5:"/v/bin/uwsgi --http-socket x"', "uwsgi"),
        (f"{GRANIAN};{GRANIAN}", "granian"),
    ],
    ids=["uwsgi-master-in-c", "granian-rust-thread"],
)
def test_a_sample_in_no_python_frame_is_the_servers_native_code(stack: str, pkg: str) -> None:
    assert owners.package(owners.leaf(stack)) == pkg
    assert owners.owner(pkg) == "server"


def test_compare_says_where_a_change_moved_the_time() -> None:
    """Run A's and run B's profiles of one point, side by side: the shares that moved 5 points
    or more, A -> B; the ones that stayed are left out."""
    cap = Capacity(1000, "1000 threads x 1 process", cores=1.0, delay_ms=10.0, memory_mb=64_000)
    a = closed_step(50, 3000, cap, p50=12, cpu=99.0)
    moved_on = {**PROFILE, "owners_pct": {**PROFILE["owners_pct"], "idle": 11.0, "app": 30.0}}
    b = amended(a, details={**a.evidence.details, "profile": moved_on})
    a = amended(a, details={**a.evidence.details, "profile": PROFILE})
    ((model, level, said),) = flame.moved([a], [b])
    assert (model, level) == ("m", "50 users")
    assert said == "app 10% → 30%; idle 31% → 11%"


def test_a_missing_py_spy_is_said_in_the_evidence_not_raised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without py-spy the step still runs: its evidence says what to install."""
    monkeypatch.setattr(profile, "pyspy", lambda: None)
    profiler = profile.Profiler(1, tmp_path / "step")
    profiler.start()
    assert profiler.stop() is None
    assert profiler.problem == "py-spy not installed (pip install py-spy)"
