"""nginx in front of each model (`lab run --front`), with the real nginx from Debian's package.

Each model's generated config passes `nginx -t`; a sweep of bare and fronted twins at low load
gives the same answers (responses verified through the front) while the client's connections to
the uWSGI model stop closing per request; a front too small for its load is named as the limit;
bad front options are refused before anything starts; Ctrl-C and a killed lab leave no nginx.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from lab.config.models import Registry
from lab.front import nginx
from lab.record.errors import LabError
from lab.record.flags import excluding
from lab.record.models import FRONTED
from lab.system import procs
from tests.helpers import lab_cli, lab_run, step_rows, wait_answer
from tests.labrun import LabRun

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(
    not any(Path(d, "nginx").is_file() for d in ("/usr/sbin", "/usr/bin")),
    reason="nginx is not installed (scripts/setup.sh installs it)",
)

SCENARIO = """\
description = "front tests: low load, short steps"
models = {models}
levels = {levels}
duration_s = 2
warmup_s = 0
settle_s = 0.5
request_timeout_s = 2
start_timeout_s = 10
probe_k = 4
probe_delay_ms = 100
pin_cpus = false

[upstream]
delay_ms = 20
"""


def scenario(tmp: Path, models: list[str], levels: list[int]) -> str:
    path = tmp / "front.toml"
    path.write_text(SCENARIO.format(models=json.dumps(models), levels=json.dumps(levels)))
    return str(path)


@pytest.mark.procs  # probes a real binary (tests/tiers.py cannot see it by name)
def test_every_models_config_passes_nginx_t(registry: Registry, tmp_path: Path) -> None:
    """uWSGI models over uwsgi_pass to a unix socket, the others over proxy_pass HTTP/1.1 with
    an upstream keepalive pool; nginx itself checks each."""
    binary = nginx.binary()
    for model in registry.models.values():
        argv, uwsgi = nginx.behind(
            model.command(registry.knobs.resolve(10), "127.0.0.1", 9), "/tmp/x.sock"
        )
        address = "unix:/tmp/x.sock" if uwsgi else "127.0.0.1:9"
        site = nginx.Site("127.0.0.1:8", 2048, address, uwsgi, 5)
        prefix = tmp_path / model.name
        prefix.mkdir()
        text = nginx.config(nginx.FrontKnobs(), site, prefix)
        (prefix / "nginx.conf").write_text(text)
        nginx.check(binary, prefix)
        assert ("uwsgi_pass app;" in text) == uwsgi == model.name.startswith("uwsgi")
        assert ("--socket" in argv and not set(nginx.UWSGI_HTTP_SOCKETS) & set(argv)) == uwsgi
        assert uwsgi or ("keepalive 256;" in text and "proxy_http_version 1.1;" in text)


def test_fronted_twins_answer_as_bare_and_keep_client_connections(tmp_path: Path) -> None:
    models = ["uwsgi-threads", "gunicorn-gthread"]
    path = scenario(tmp_path, models, [4])
    run, done = lab_run(
        tmp_path / "out", "--scenario", path, "--front", "bare,nginx", "--engine", "lab"
    )
    steps = {s["model"]: s for s in step_rows(run)}
    checks = [json.loads(line) for line in (run / "preflight.jsonl").read_text().splitlines()]
    assert all(c["ok"] for c in checks) and len(checks) == 4, checks  # answers verified
    for name in models:
        bare, front = steps[name], steps[name + FRONTED]
        assert bare["errors"] == front["errors"] == {}
        assert front["throughput_rps"] == pytest.approx(bare["throughput_rps"], rel=0.25)
        assert bare["front_cpu_pct"] == -1.0 and front["front_cpu_pct"] >= 0
        assert front["front_cpu_ms_per_req"] is not None
        assert front["server_connections"] / front["requests"] < 0.5  # clients keep alive
        pooled = front["front_server_connections"]  # nginx -> an HTTP server: kept alive too
        assert pooled == -1 if name.startswith("uwsgi") else 0 <= pooled < 0.1 * front["requests"]
    for name in models:  # the summary says what the front cost exactly where both steps were fair
        flags = [*steps[name]["flags"], *steps[name + FRONTED]["flags"]]
        said = f"behind nginx, {name} at 4 users: front CPU" in done.stdout
        assert said == (not excluding(flags)), (flags, done.stdout[-2000:])
    bare_uwsgi = steps["uwsgi-threads"]
    assert bare_uwsgi["server_connections"] / bare_uwsgi["requests"] > 0.5  # closes each one
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["execution"]["front"]["knobs"] == vars(nginx.FrontKnobs())
    assert "--socket" in manifest["models"]["uwsgi-threads+nginx"]["argv"]
    assert not list((run / "pids").glob("*.pid"))


def test_a_keepalive_pool_too_small_shows_as_new_server_connections(tmp_path: Path) -> None:
    """keepalive=1: nginx keeps one idle connection to the server, so where answers to 16 users
    come back together the rest are closed and the next requests open new ones (about 13% of
    requests here), counted on the server's private port; the default pool keeps them all."""
    path = scenario(tmp_path, ["gunicorn-gthread"], [16])
    run, _ = lab_run(
        tmp_path / "out", "--scenario", path, "--front", "nginx", "--front-knob", "keepalive=1"
    )
    (step,) = step_rows(run)
    assert step["errors"] == {}, step
    assert step["front_server_connections"] > 0.05 * step["requests"], step


def test_a_front_too_small_is_named_the_limit(tmp_path: Path) -> None:
    path = scenario(tmp_path, ["gunicorn-gthread"], [24])
    run, _ = lab_run(
        tmp_path / "out", "--scenario", path, "--front", "nginx",
        "--front-knob", "connections=16", "--knob", "concurrency=24",
    )  # fmt: skip
    (step,) = step_rows(run)
    assert step["limited_by"] == "front", step["limit_reason"]
    assert "worker_connections are not enough" in str(step["details"]["front_limited"])


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--front", "apache"), "choose from bare, nginx"),
        (("--front", "nginx", "--front-knob", "workers=0"), "out of range"),
        (("--front", "nginx", "--front-knob", "cache=1"), "unknown"),
        (("--front", "nginx", "--front-knob", "buffering=maybe"), "whole number"),
        (("--front-knob", "workers=2"), "only with --front"),
        (("--front", "nginx", "--backend", "docker"), "needs --backend native"),
    ],
    ids=["unknown-front", "zero-workers", "unknown-knob", "bad-buffering", "knob-alone", "docker"],
)
def test_bad_front_options_refused_before_anything_starts(
    tmp_path: Path, args: tuple[str, ...], says: str
) -> None:
    out = tmp_path / "out"
    done = subprocess.run(
        lab_cli("run", "--models", "gunicorn-gthread", "--out", str(out), *args),
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode != 0 and says in done.stderr + done.stdout
    assert "Traceback" not in done.stderr
    assert not out.exists() or not any(out.iterdir())


def test_missing_nginx_says_how_to_install(tmp_path: Path) -> None:
    with pytest.raises(LabError, match="apt-get install nginx-light"):
        nginx.binary(search=str(tmp_path))


@pytest.mark.parametrize("how", ["ctrl-c", "lab-killed"])
def test_no_nginx_left_behind(tmp_path: Path, how: str) -> None:
    path = scenario(tmp_path, ["gunicorn-gthread"], [2, 3, 4])
    (tmp_path / "out").mkdir()
    run = LabRun(tmp_path / "out", "--scenario", path, "--front", "nginx")
    front = "gunicorn-gthread+nginx-front"
    try:
        run.wait_until("nginx started", lambda: run.pid(front))
        record = run.pid(front)
        assert record is not None and record.is_running()
        if how == "ctrl-c":
            run.popen.send_signal(signal.SIGINT)
            assert run.finish() == 130, run.output()
        else:
            run.kill()  # nothing of the lab cleans up: the next run removes the leftovers
            again = subprocess.run(
                lab_cli("run", "--models", "nope", "--out", str(tmp_path / "out")),
                capture_output=True, text=True, timeout=60,
            )  # fmt: skip
            assert "leftover" in again.stdout + again.stderr, again
        assert not record.is_running()
    finally:
        run.kill()


def test_lab_serve_front_is_what_compose_runs_and_the_lab_page_shows_nginx_cpu(
    upstream,
    tmp_path: Path,  # noqa: ANN001
) -> None:
    """`lab serve MODEL --front nginx --meter-port M` (Compose's `front` profile) natively: the
    model answers through nginx, a headless locust with the lab page reads nginx's CPU from the
    meter apart from the server's and saves it, and SIGTERM leaves no process behind."""
    port, meter = procs.free_port(), procs.free_port()
    argv = lab_cli(
        "serve", "uwsgi-threads", "--front", "nginx", "--port", str(port),
        "--meter-port", str(meter), "--upstream-url", upstream.url, "--max-users", "8",
    )  # fmt: skip
    log = open(tmp_path / "serve.log", "wb")  # noqa: SIM115 - closed below
    serve = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_answer(f"http://127.0.0.1:{meter}/", serve, 60)
        started = {p.pid for p in psutil.Process(serve.pid).children(recursive=True)}
        env = {
            **os.environ,
            "LAB_TARGETS": f"uwsgi-threads{FRONTED}=http://127.0.0.1:{port}",
            "LAB_UPSTREAM_URL": upstream.url,
            "LAB_METER_PORT": str(meter),
        }
        headless = ("--headless", "-u", "4", "-r", "4", "-t", "6s", "--lab-delay-ms", "50")
        locust = [sys.executable, "-m", "locust", "-f", "loadgen/locustfile.py,lab/webui/page.py"]
        out = tmp_path / "results"
        done = subprocess.run(
            [*locust, *headless, "--lab-out", str(out)],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=90,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        (run_dir,) = out.iterdir()
        (step,) = step_rows(run_dir)
        assert step["ok"] > 0 and not step["errors"], step
        assert step["front_cpu_pct"] >= 0 and step["front_rss_mb"] > 0, step
        assert step["server_rss_mb"] > step["front_rss_mb"], step  # each measured apart
    finally:
        serve.send_signal(signal.SIGTERM)
        code = serve.wait(timeout=30)
        log.close()
    assert code == 128 + signal.SIGTERM, (tmp_path / "serve.log").read_text()[-2000:]
    assert not [pid for pid in started if _running(pid)]


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_lab_serve_takes_one_front(tmp_path: Path) -> None:
    """`lab serve X --front bare,nginx` is refused, and its help no longer says it runs both
    (the option was `lab run`'s, shared)."""
    done = subprocess.run(
        lab_cli("serve", "uwsgi-threads", "--front", "bare,nginx"),
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    said = done.stdout + done.stderr
    assert done.returncode != 0 and "'bare,nginx' is not one of 'bare', 'nginx'" in said, said
    assert "Traceback" not in said and len(said.strip().splitlines()) == 1
    helped = subprocess.run(lab_cli("serve", "--help"), capture_output=True, text=True, timeout=60)
    assert "runs both" not in helped.stdout and "bare|nginx" in " ".join(helped.stdout.split())
