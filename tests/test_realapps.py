"""Real apps nobody here wrote, from PyPI, through the door: `lab run --app ... --check-only`.

httpbin (Flask) echoes the request's URL and headers and answers a new UUID each time; a Django
project made by `django-admin startproject` answers a login form with a new CSRF token each time;
a bottle app and a Starlette (ASGI) app answer timestamps and request ids; django-todo (a
published Django app, served by the project in examples/django-todo) needs its migrations, its data
and a logged-in session in the lab's PostgreSQL. Each is checked under
real servers: its answers must be found alike (what varied by itself is named, not compared) and
byte-for-byte comparison, when asked for, must refuse what varies.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import EXAMPLES, lab_cli

WSGI = "uwsgi-threads,gunicorn-gevent"  # an OS-thread model and a monkey-patched one
ASGI = "uvicorn,granian-asgi"
SLOW_VIEW = "0.2"  # seconds a test app's slow route waits: the probe's route

BOTTLE_APP = f"""
import time, uuid
from bottle import Bottle, request, response

app = Bottle()


@app.get("/now")
def now():
    return {{"at": time.time(), "id": str(uuid.uuid4()), "url": request.url}}


@app.get("/page")
def page():
    response.content_type = "text/html; charset=utf-8"
    return f"<p>request {{uuid.uuid4()}} at {{time.ctime()}} for {{request.url}}</p>"


@app.get("/slow")
def slow():
    time.sleep({SLOW_VIEW})
    return "done"
"""

STARLETTE_APP = f"""
import asyncio, secrets, time
from starlette.applications import Starlette
from starlette.responses import HTMLResponse, JSONResponse
from starlette.routing import Route


async def now(request):
    return JSONResponse({{"at": time.time(), "id": secrets.token_hex(8), "url": str(request.url)}})


async def form(request):
    token = secrets.token_urlsafe(24)
    return HTMLResponse(f'<form><input name="csrf" value="{{token}}"></form>')


async def slow(request):
    await asyncio.sleep({SLOW_VIEW})
    return JSONResponse({{"done": True}})


app = Starlette(routes=[Route("/now", now), Route("/form", form), Route("/slow", slow)])
"""

DJANGO_SLOW_VIEW = f"""

import time
from django.http import HttpResponse


def slow(request):
    time.sleep({SLOW_VIEW})
    return HttpResponse("done")


urlpatterns.append(path("slow/", slow))
"""


def check(out: Path, *args: str) -> tuple[int, str, dict]:
    """`lab run --check-only` on a user's app: exit code, stderr, appcheck.json."""
    argv = lab_cli("run", "--check-only", "--knob", "concurrency=8", "--out", str(out), *args)
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    found = list(out.glob("*/appcheck.json"))
    return done.returncode, done.stderr, json.loads(found[0].read_text()) if found else {}


@pytest.fixture(scope="module")
def django_project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project as `django-admin startproject mysite` makes it, plus one slow view to probe."""
    root = tmp_path_factory.mktemp("django")
    admin = Path(sys.executable).with_name("django-admin")
    subprocess.run([str(admin), "startproject", "mysite", str(root)], check=True)
    with (root / "mysite" / "urls.py").open("a") as urls:
        urls.write(DJANGO_SLOW_VIEW)
    return root


def app_dir(tmp_path: Path, name: str, source: str) -> Path:
    (tmp_path / f"{name}.py").write_text(source)
    return tmp_path


def test_httpbin_whose_bodies_vary_gets_in(tmp_path: Path) -> None:
    """httpbin's /uuid answers a new UUID, /get and /anything echo the URL (each model on its own
    port): alike by shape, and the table says which varied by itself."""
    paths = ("/get", "/uuid", "/anything", "/html", "/delay/1")
    rc, err, result = check(
        tmp_path / "out", "--app", "httpbin:app", "--models", WSGI,
        *[arg for p in paths for arg in ("--path", p)],
    )  # fmt: skip
    assert rc == 0, err
    assert result["differences"] == {} and result["compare"] == "shape"
    assert "JSON values" in result["varied"]["/uuid"]
    assert all(m["probe"]["passed"] for m in result["models"])


def test_httpbin_is_refused_when_bodies_must_be_identical(tmp_path: Path) -> None:
    rc, err, result = check(
        tmp_path / "out", "--app", "httpbin:app", "--models", WSGI, "--compare", "exact",
        "--path", "/uuid", "--probe-path", "/delay/1",
    )  # fmt: skip
    assert rc == 1 and "/uuid differs between models" in err
    assert "body: expected" in result["differences"]["/uuid"]["gunicorn-gevent"]


def test_django_project_starts_by_its_wsgi_module_and_settings(
    django_project: Path, tmp_path: Path
) -> None:
    """The admin's login form: a new CSRF token in every answer."""
    rc, err, result = check(
        tmp_path / "out", "--app", "mysite.wsgi:application", "--app-dir", str(django_project),
        "--env", "DJANGO_SETTINGS_MODULE=mysite.settings", "--models", WSGI,
        "--path", "/admin/login/", "--path", "/admin/login/?next=/admin/", "--path", "/slow/",
    )  # fmt: skip
    assert rc == 0, err
    assert result["differences"] == {}
    assert result["varied"]["/admin/login/"]  # its CSRF token


def test_django_todo_with_its_migrations_and_data_gets_in(tmp_path: Path) -> None:
    """The docs' worked example, checked alone: django-todo's own migrations and the seed run
    before the check, and its pages answer a signed-in user (the seed's session) under every
    model, the task list's ids and dates varying by themselves."""
    site = shutil.copytree(EXAMPLES / "django-todo", tmp_path / "site")
    rc, err, result = check(
        tmp_path / "out", "--app", "todosite.wsgi:application", "--app-dir", str(site),
        "--env", "DJANGO_SETTINGS_MODULE=todosite.settings", "--env", "DATABASE_URL={postgres_url}",
        "--db-setup", "python manage.py migrate -v0", "--db-setup", "python seed.py",
        "--header", "Cookie: sessionid=labexamplesession0001", "--models", WSGI,
        "--path", "/health/", "--path", "/todo/", "--path", "/todo/1/groceries/",
    )  # fmt: skip
    assert rc == 0, err
    assert result["differences"] == {}
    for m in result["models"]:
        assert m["answers"]["/todo/1/groceries/"]["status"] == 200, m["model"]  # not the login


def test_django_without_its_settings_is_one_line(django_project: Path, tmp_path: Path) -> None:
    """The settings module named wrong: the import check says so, no traceback."""
    rc, err, _ = check(
        tmp_path / "out", "--app", "mysite.wsgi:application", "--app-dir", str(django_project),
        "--env", "DJANGO_SETTINGS_MODULE=nosuch.settings", "--path", "/admin/login/",
    )  # fmt: skip
    assert rc == 2 and "cannot import it" in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("name", "source", "models", "paths"),
    [
        ("bottle_app", BOTTLE_APP, WSGI, ("/now", "/page", "/slow")),
        ("starlette_app", STARLETTE_APP, ASGI, ("/now", "/form", "/slow")),
    ],
    ids=["bottle-wsgi", "starlette-asgi"],
)
def test_other_frameworks_whose_bodies_vary_get_in(
    name: str, source: str, models: str, paths: tuple[str, ...], tmp_path: Path
) -> None:
    directory = app_dir(tmp_path, name, source)
    rc, err, result = check(
        tmp_path / "out", "--app", f"{name}:app", "--app-dir", str(directory), "--models", models,
        *[arg for p in paths for arg in ("--path", p)],
    )  # fmt: skip
    assert rc == 0, err
    assert result["differences"] == {}
    assert set(result["varied"]) == set(paths[:2])


def test_an_app_whose_json_shape_differs_by_model_is_refused(tmp_path: Path) -> None:
    """The same app answering a different JSON shape under gevent: refused, with the table."""
    source = BOTTLE_APP + (
        "\n\n@app.get('/who')\ndef who():\n    import sys\n"
        "    return {'n': 1} if 'gevent' in sys.modules else {'n': 'one'}\n"
    )
    directory = app_dir(tmp_path, "who_app", source)
    rc, err, result = check(
        tmp_path / "out", "--app", "who_app:app", "--app-dir", str(directory), "--models", WSGI,
        "--path", "/who", "--path", "/now", "--probe-path", "/slow",
    )  # fmt: skip
    assert rc == 1 and "/who differs between models" in err
    assert "$.n: number, expected str" in result["differences"]["/who"]["gunicorn-gevent"]
    assert "/now" not in result["differences"]
