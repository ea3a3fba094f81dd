"""`lab routes --app X`: a starting mix file read from the routes a real app declares (Flask's
URL map, Django's URL resolver, Starlette's routes), imported as the import check imports it;
the file it writes loads with the lab's own mix loader."""

from __future__ import annotations

import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest

from lab.config import approutes, mixfile
from lab.config.approutes import Declared
from lab.record.errors import LabError
from tests.helpers import EXAMPLES, lab_cli

STARLETTE_APP = textwrap.dedent(
    """
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Mount, Route, WebSocketRoute


    async def ok(request):
        return JSONResponse({"ok": True})


    async def ws(websocket):
        await websocket.close()


    api = [Route("/items/{item_id:int}", ok, methods=["GET", "DELETE"]), Route("/items", ok,
           methods=["POST"])]
    app = Starlette(routes=[Route("/healthz", ok), Route("/orders/{order_id:uuid}", ok),
                            Mount("/api", routes=api), WebSocketRoute("/ws", ws)])
    """
)


def lab_routes(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    out = tmp_path / "mix.toml"
    done = subprocess.run(
        lab_cli("routes", *args, "--mix", str(out)), capture_output=True, text=True, timeout=120
    )
    return done, out


def loaded(path: Path) -> dict[str, float]:
    """The mix file as the lab's own loader reads it: each route's label and weight."""
    return {f.route.label: f.weight for f in mixfile.read(path, None, ())}


def test_flask_httpbin(tmp_path: Path) -> None:
    """httpbin (Flask, from PyPI): every rule of its URL map, each method apart, a `<path>`
    parameter as a placeholder, writes weighted 0; no static files; the health route first."""
    done, out = lab_routes(tmp_path, "--app", "httpbin:app")
    assert done.returncode == 0, done.stderr
    mix = loaded(out)
    assert list(mix)[0] == "/" and mix["/"] == 1  # no /health: its landing page stands in
    assert mix["/get"] == 1 and mix["POST /post"] == 0 and mix["DELETE /delete"] == 0
    assert mix["/anything/{choice:a|b|c}"] == 1 and mix["PUT /anything/{choice:a|b|c}"] == 0
    assert not any("static" in label for label in mix)
    assert "# a write: add its body" in out.read_text()


def test_django_todo_with_its_settings(tmp_path: Path) -> None:
    """django-todo (from PyPI, served by examples/django-todo): its URL resolver walked through
    `include()`, `<int:...>` as a number choice, `/health/` guessed and weighted 0, a GET named
    for deleting weighted 0, the login form weighted 0 with the --login to give instead; --env
    as `lab run` takes it, {postgres_url} naming a closed port."""
    site = shutil.copytree(EXAMPLES / "django-todo", tmp_path / "site")
    done, out = lab_routes(
        tmp_path, "--app", "todosite.wsgi:application", "--app-dir", str(site),
        "--env", "DJANGO_SETTINGS_MODULE=todosite.settings",
        "--env", "DATABASE_URL={postgres_url}",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    mix = loaded(out)
    assert list(mix)[0] == "/health/" and mix["/health/"] == 0
    assert mix["/todo/"] == 1
    assert mix["/todo/{choice:1|2|3}/{choice:a|b|c}/"] == 1
    assert mix["/todo/delete/{choice:1|2|3}/"] == 0  # its name says it deletes
    assert mix["/login/"] == 0 and mix["POST /login/"] == 0  # the login: lab run --login
    assert "with lab run --login 'POST /login/'" in out.read_text()
    assert "{list_id}: values your data holds" in out.read_text()


def test_starlette_app_with_a_mount(tmp_path: Path) -> None:
    """A Starlette app: a Mount's routes under its prefix, `{id:int}` and `{id:uuid}` as
    placeholders, a WebSocket route left out, `/healthz` guessed; the file as written passes
    `lab run --check-only` under uvicorn."""
    (tmp_path / "star.py").write_text(STARLETTE_APP)
    done, out = lab_routes(tmp_path, "--app", "star:app", "--app-dir", str(tmp_path))
    assert done.returncode == 0, done.stderr
    mix = loaded(out)
    assert list(mix) == [
        "/healthz",
        "/orders/{uuid}",
        "/api/items/{choice:1|2|3}",
        "DELETE /api/items/{choice:1|2|3}",
        "POST /api/items",
    ]
    assert mix["/healthz"] == 0 and mix["/orders/{uuid}"] == 1 and mix["POST /api/items"] == 0
    checked = subprocess.run(
        lab_cli(
            "run", "--app", "star:app", "--app-dir", str(tmp_path), "--mix", str(out),
            "--models", "uvicorn", "--check-only", "--out", str(tmp_path / "runs"),
        ),
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stdout[-2000:] + checked.stderr[-2000:]


def test_an_app_that_is_no_framework_app_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "bare.py").write_text(
        "def app(environ, start_response):\n    start_response('200 OK', [])\n    return [b'']\n"
    )
    done, out = lab_routes(tmp_path, "--app", "bare:app", "--app-dir", str(tmp_path))
    said = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert done.returncode == 2 and len(said) == 1, said
    assert "cannot read its routes" in said[0] and "not a Flask, Django or Starlette app" in said[0]
    assert not out.exists()


@pytest.mark.parametrize(
    ("routes", "first"),
    [
        ((Declared("/a", "GET"), Declared("/ping", "GET")), "/ping"),
        ((Declared("/a/{x:int}", "GET"), Declared("/b", "GET"), Declared("/", "GET")), "/"),
        ((Declared("/a/{x:int}", "GET"), Declared("/b", "GET")), "/b"),
    ],
    ids=["conventional-name", "root", "first-plain-get"],
)
def test_the_health_route_guessed(routes: tuple[Declared, ...], first: str) -> None:
    assert approutes.health(routes).path == first


def test_no_plain_get_is_refused_with_the_fix() -> None:
    with pytest.raises(LabError, match="no GET route without parameters"):
        approutes.health((Declared("/a/{x:int}", "GET"), Declared("/b", "POST")))


PLAIN_WSGI = (
    "def app(environ, start_response):\n    start_response('200 OK', [])\n    return [b'ok']\n"
)
SUBCLASSED = "from flask import Flask\n\n\nclass Mine(Flask):\n    pass\n\n\napp = Mine(__name__)\n"


@pytest.mark.parametrize(
    "target,files,env,framework",
    [
        ("httpbin:app", {}, (), "Flask"),
        ("servers.app_asgi:app", {}, (), "Quart"),
        ("star:app", {"star.py": STARLETTE_APP}, (), "Starlette"),
        ("mine:app", {"mine.py": SUBCLASSED}, (), "Flask"),
        ("plain:app", {"plain.py": PLAIN_WSGI}, (), ""),
        (
            "todosite.wsgi:application",
            None,
            ("DJANGO_SETTINGS_MODULE=todosite.settings",),
            "Django",
        ),
    ],
    ids=["flask-httpbin", "quart", "starlette", "flask-subclass", "plain-wsgi", "django-todo"],
)
def test_the_import_check_names_the_app_s_framework(
    tmp_path: Path, target: str, files: dict[str, str] | None, env: tuple[str, ...], framework: str
) -> None:
    """The framework the answer names ("your app is WSGI (Django)") is read from the app's own
    type, its bases included, in the import check's child: a plain WSGI callable names none."""
    from lab.config import appenv, userapp

    site = tmp_path / "site"
    if files is None:  # the tutorial's Django site, as lab run takes it
        shutil.copytree(EXAMPLES / "django-todo", site)
    else:
        site.mkdir()
        for name, text in files.items():
            (site / name).write_text(text)
    parsed = appenv.parse((*env, "DATABASE_URL=postgresql://127.0.0.1:9/x"))
    app = userapp.inspect_app(target, site, parsed, environ=dict(parsed))
    assert app.framework == framework
