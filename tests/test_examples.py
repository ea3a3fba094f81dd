"""The tutorial's files (examples/django-todo, docs/tutorial.md) work as the page says: the access
log and the HAR, recorded from a real browser session on the site, read into the mixes the page
shows, with what was left out counted; the mix file is valid; and each of the three gets the real
app (django-todo from PyPI, its migrations and seed in the lab's PostgreSQL, a login per user)
through the check under a real server."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from lab.config import accesslog, har, mixfile
from tests.helpers import EXAMPLES, lab_cli

SITE = EXAMPLES / "django-todo"
APP = (
    *("--app", "todosite.wsgi:application"),
    *("--env", "DJANGO_SETTINGS_MODULE=todosite.settings", "--env", "DATABASE_URL={postgres_url}"),
    *("--db-setup", "python manage.py migrate -v0", "--db-setup", "python seed.py"),
    *("--login", "POST /login/", "--login-body", "username=lab&password=lab"),
    *("--csrf", "cookie:csrftoken=header:X-CSRFToken,field:csrfmiddlewaretoken"),
)
# The pages a signed-in user reads: every file's mix loads them, and nothing that writes.
READ_PAGES = {"/todo/", "/todo/1/groceries/"}


def test_the_access_log_reads_into_the_pages_with_every_other_line_counted() -> None:
    read = accesslog.read_file(SITE / "access.log")
    shapes = {r.shape for r in read.routes}
    assert {"GET /todo/", "GET /todo/task/{id}/"} <= shapes, shapes
    assert all(r.method == "GET" for r in read.routes)  # the login and the write left out
    assert read.left_out, "the browser's login POST and missing static files are left out"
    assert read.kept + sum(read.left_out.values()) == read.lines


def test_the_har_reads_into_the_pages_without_cookies_or_tokens() -> None:
    read = har.read_file(SITE / "session.har")
    targets = {route.path for route, _ in read.routes}
    assert targets >= READ_PAGES, targets
    assert read.kept + sum(read.left_out.values()) == read.entries
    for route, _ in read.routes:  # one user's session and token never travel with the mix
        names = {name.lower() for name, _ in route.headers}
        assert not names & {"cookie", "x-csrftoken"}, route


def test_the_mix_file_is_valid_and_loads_only_what_reads() -> None:
    routes = mixfile.read(SITE / "mix.toml", None, ())
    loaded = {r.route.path for r in routes if r.weight > 0}
    assert loaded >= READ_PAGES, loaded
    assert all(r.route.method == "GET" for r in routes if r.weight > 0)


@pytest.mark.parametrize(
    "traffic",
    [("--mix", "mix.toml"), ("--access-log", "access.log"), ("--har", "session.har")],
    ids=["mix", "access-log", "har"],
)
def test_each_file_gets_the_real_app_through_the_check(
    tmp_path: Path, traffic: tuple[str, str]
) -> None:
    site = shutil.copytree(SITE, tmp_path / "site")
    option, name = traffic
    argv = lab_cli(
        "run", *APP, "--app-dir", str(site), option, str(site / name),
        "--models", "gunicorn-gthread", "--check-only", "--out", str(tmp_path / "out"),
    )  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    (check,) = (tmp_path / "out").glob("*/appcheck.json")
    result = json.loads(check.read_text())
    assert result["differences"] == {}, result["differences"]
    assert "left out" in done.stdout or option == "--mix"
