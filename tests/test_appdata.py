"""A user's app with its schema and data: set up once, then a fresh copy for every model.

The app is tests/prodapp/shop (a Flask factory with SQLAlchemy to the lab's PostgreSQL): its
/checkout writes an order and calls the payment API, /items/ID reads a row the schema's seed
put there, /fresh answers 500 once the database holds more orders than one model's check makes,
and each build logs the orders it found to var/built.log.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import psycopg2
import pytest

from lab.backends import databases, dbdata
from tests.helpers import lab_cli, step_rows

SHOP = Path(__file__).parent / "prodapp"
SCHEMA = "psql {postgres_url} -v ON_ERROR_STOP=1 -q -f shop/schema.sql"
ENV = ("--env", "DATABASE_URL={postgres_url}", "--env", "PAYMENTS_API={upstream_url}")


@pytest.fixture()
def shop(tmp_path: Path) -> Path:
    return Path(shutil.copytree(SHOP, tmp_path / "app"))


def lab(shop: Path, out: Path, *args: str) -> subprocess.CompletedProcess[str]:
    argv = lab_cli(
        *("run", "--app", "shop:create_app('lab')", "--app-dir", str(shop), *ENV),
        *("--knob", "concurrency=2", "--out", str(out), *args),
    )
    return subprocess.run(argv, capture_output=True, text=True, timeout=300)


def builds(shop: Path) -> list[str]:
    return (shop / "var" / "built.log").read_text().splitlines()


def test_each_models_check_starts_from_the_same_data(shop: Path, tmp_path: Path) -> None:
    """Migrations run once before the import check; each model's check then writes orders
    (each write twice, under every model) on its own copy: /fresh never sees another model's."""
    done = lab(
        shop,
        tmp_path / "out",
        *("--db-setup", SCHEMA, "--path", "/health", "--path", "/items/42"),
        *("--path", "POST /checkout", "--path", "/fresh", "--probe-path", "/items/42"),
        *("--models", "uwsgi-threads,gunicorn-gthread,granian-wsgi", "--check-only"),
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert [line.split()[2] for line in builds(shop)] == ["orders=0"] * 4  # import + 3 models


def test_a_sweep_gives_every_model_a_fresh_copy_and_says_which(shop: Path, tmp_path: Path) -> None:
    """The first model's load writes orders; the next one is built on none of them, and each
    step's evidence names the snapshot and the copy it ran on."""
    done = lab(
        shop,
        tmp_path / "out",
        *("--db-setup", SCHEMA, "--path", "/health", "--path", "POST /checkout"),
        *("--upstream-route", "POST /v1/charges=20ms", "--db-durability", "fast"),
        *("--models", "gunicorn-gthread,uwsgi-threads", "--levels", "2"),
        *("--duration", "2", "--warmup", "0"),
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "writes cost less than in production" in done.stdout
    (run_dir,) = (tmp_path / "out").iterdir()
    served = json.loads((run_dir / "manifest.json").read_text())["databases"]
    assert served["durability"] == "fast" and served["snapshot"]["setup"] == [SCHEMA]
    steps = step_rows(run_dir)
    assert all(s["ok"] > 0 for s in steps), steps
    copies = [s["details"]["snapshot"] for s in steps]
    assert len({c["name"] for c in copies}) == 1 and len({c["copy"] for c in copies}) == 2
    # import check + two models' checks + two models' sweeps: every build found no order
    assert [line.split()[2] for line in builds(shop)] == ["orders=0"] * 5


def test_a_pg_dump_archive_seeds_the_database(shop: Path, tmp_path: Path) -> None:
    archive = tmp_path / "shop.dump"
    with databases.running(("postgres",), tmp_path / "dump") as dbs:
        url = dbs["postgres"].url
        load = ["psql", url, "-v", "ON_ERROR_STOP=1", "-q", "-f", str(shop / "shop/schema.sql")]
        subprocess.run(load, check=True, capture_output=True)
        subprocess.run(["pg_dump", "-Fc", "-f", str(archive), url], check=True)
    done = lab(
        shop,
        tmp_path / "out",
        *("--db-seed", str(archive), "--path", "/health", "--path", "/items/42"),
        *("--models", "gunicorn-gthread", "--check-only"),
    )
    assert done.returncode == 0, done.stderr[-2000:]  # /items/42 answered: the row is there


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--db-setup", "psql {postgres_url} -v ON_ERROR_STOP=1 -f nowhere.sql"), "exited 1:"),
        (("--db-seed", str(SHOP / "shop/__init__.py")), "--db-seed"),
        (("--db-seed", "nowhere.sql"), "--db-seed nowhere.sql: no such file"),
    ],
    ids=["setup-fails", "seed-is-no-sql", "no-seed-file"],
)
def test_a_failing_setup_is_named_with_its_exit_and_output(
    shop: Path, tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    done = lab(shop, tmp_path / "out", *args, "--path", "/health", "--check-only")
    assert done.returncode == 2 and message in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert not list((tmp_path / "out").glob("*"))  # nothing swept, nothing half-written


@pytest.mark.parametrize(
    ("fast", "expected"), [(False, "on"), (True, "off")], ids=["production", "fast"]
)
def test_postgres_is_as_durable_as_production_unless_asked(
    tmp_path: Path, fast: bool, expected: str
) -> None:
    with databases.running(("postgres",), tmp_path, fast=fast) as dbs:
        conn = psycopg2.connect(dbs["postgres"].url)
        try:
            cursor = conn.cursor()
            for setting in ("fsync", "synchronous_commit", "full_page_writes"):
                cursor.execute(f"SHOW {setting}")
                assert cursor.fetchone()[0] == expected, setting
        finally:
            conn.close()


def test_advise_honours_the_apps_database_and_upstream_options(shop: Path, tmp_path: Path) -> None:
    """`lab advise` takes --db-setup and --upstream-route as `lab run` does: its open-loop steps
    read rows the setup loaded (else /items/42 would answer 500) through the same snapshot."""
    argv = lab_cli(
        *("advise", "--app", "shop:create_app('lab')", "--app-dir", str(shop), *ENV),
        *("--db-setup", SCHEMA, "--upstream-route", "GET /v1/rates/*=20ms"),
        *("--path", "/health", "--path", "/items/42", "--models", "gunicorn-gthread"),
        *("--rps", "20", "--p99-ms", "500", "--duration", "2", "--warmup", "0"),
        *("--json", "--out", str(tmp_path / "out")),
    )
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert done.returncode in (0, 1, 4), done.stderr[-2000:]
    run_dir = Path(json.loads(done.stdout)["run_dir"])
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["scenario"]["upstream"]["routes"] == ["GET /v1/rates/*=20ms"]
    steps = step_rows(run_dir)
    assert steps and all(s["ok"] > 0 and not s["errors"].get("http_5xx") for s in steps), steps


def test_a_snapshot_puts_redis_back_as_the_setup_left_it(tmp_path: Path) -> None:
    import redis

    with databases.running(("redis",), tmp_path) as dbs:
        client = redis.Redis.from_url(dbs["redis"].url)
        client.set("greeting", "hello")
        client.set("session", "short", px=60_000)
        snapshot = dbdata.Snapshot(
            dbdata.DataSpec(), None, databases.Database("redis", dbs["redis"].url)
        )
        snapshot.prepare()
        client.set("greeting", "changed by a model")
        client.set("written", "by a model")
        assert snapshot.fresh("next model")["snapshot"]["copy"] == 1
        assert sorted(client.keys()) == [b"greeting", b"session"]
        assert client.get("greeting") == b"hello" and 0 < client.pttl("session") <= 60_000


def test_an_app_run_resumes_checking_the_app_again(shop: Path, tmp_path: Path) -> None:
    """A step lost from an --app run is measured again by `lab run --resume DIR` alone: the app
    is checked again (its setup and the snapshot too), d stays the recorded one."""
    done = lab(
        shop,
        tmp_path / "out",
        *("--db-setup", SCHEMA, "--path", "/health", "--path", "/items/42"),
        *("--models", "gunicorn-gthread,uwsgi-threads", "--levels", "2"),
        *("--duration", "1", "--warmup", "0"),
    )
    assert done.returncode == 0, done.stderr[-2000:]
    (run_dir,) = (tmp_path / "out").iterdir()
    steps = (run_dir / "steps.jsonl").read_text().splitlines()
    (run_dir / "steps.jsonl").write_text(steps[0] + "\n")  # the second model's step is lost
    manifest = json.loads((run_dir / "manifest.json").read_text())
    (run_dir / "manifest.json").write_text(json.dumps({**manifest, "status": "interrupted"}))
    resumed = subprocess.run(
        lab_cli("run", "--resume", str(run_dir)), capture_output=True, text=True, timeout=300
    )
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-2000:]
    again = step_rows(run_dir)
    assert sorted(s["model"] for s in again) == ["gunicorn-gthread", "uwsgi-threads"]
    assert all(s["ok"] > 0 and s["details"]["snapshot"] for s in again), again
    after = json.loads((run_dir / "manifest.json").read_text())
    assert after["status"] == "complete" and len(after["resumes"]) == 1
    assert after["scenario"]["app"]["solo_ms"] == manifest["scenario"]["app"]["solo_ms"]


@pytest.mark.parametrize("command", ["run", "advise"], ids=["run", "advise"])
def test_writing_routes_against_your_own_database_need_allow_writes(
    shop: Path, tmp_path: Path, command: str
) -> None:
    """--db-url is the user's own database, never copied: a POST route is refused in one line
    before anything starts, naming --allow-writes; with it, that refusal is gone."""
    target = ("--rps", "10", "--p99-ms", "100") if command == "advise" else ()
    argv = lab_cli(
        *(command, "--app", "shop:create_app('lab')", "--app-dir", str(shop), *target),
        *("--db-url", "postgresql://127.0.0.1:9/mine", "--path", "/health"),
        *("--path", "POST /checkout", "--out", str(tmp_path / "out")),
    )
    refused = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    said = refused.stdout + refused.stderr
    assert "POST /checkout would write to it" in said and "--allow-writes" in said
    assert "Traceback" not in said and not (tmp_path / "out").exists()
    allowed = subprocess.run([*argv, "--allow-writes"], capture_output=True, text=True, timeout=120)
    assert "would write to it" not in allowed.stdout + allowed.stderr
