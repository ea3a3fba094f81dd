"""A session per simulated user: the login step (`lab.record.login`) parsed, tried by the check
(`lab.run.logincheck`) and run by every generator (`loadgen.session`) against real apps on
loopback: a Flask app with Flask-Login's session and a form's CSRF token, and a Django project
with its session, CSRF and auth middleware (tests/loginapps). N users are N sessions on the
server, a wrong password refuses the app before any load, and logins are counted apart from the
mix in the closed loop, the open loop and on two generator processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lab.cli.measure.app import login_of
from lab.config.userapp import Route
from lab.record import placeholders
from lab.record.errors import LabError
from lab.record.login import Csrf, Login, form_token, parse_csrf, parse_login, with_fields
from lab.run import logincheck
from lab.run.generator import run_step
from lab.system import procs
from loadgen.protocol import Start
from tests.helpers import lab_cli, lab_run, step_rows, wait_answer

APPS = Path(__file__).parent / "loginapps"
FLASK_CSRF = "form:csrf_token=field:csrf_token,header:X-CSRFToken"
DJANGO_CSRF = "cookie:csrftoken=header:X-CSRFToken"
GOOD = "username=alice&password=secret"
BAD = "username=alice&password=wrong"
# app -> its login, its page and write behind the login, and how it says sessions seen
SITES = {
    "flask": ("POST /login", FLASK_CSRF, "/me", "/notes", "/seen"),
    "django": ("POST /accounts/login/", DJANGO_CSRF, "/me/", "/notes/", "/seen/"),
}


@pytest.mark.parametrize(
    "text,csrf",
    [
        (
            "cookie:csrftoken=header:X-CSRFToken",
            Csrf("cookie", "csrftoken", (("header", "X-CSRFToken"),)),
        ),
        (
            FLASK_CSRF,
            Csrf("form", "csrf_token", (("field", "csrf_token"), ("header", "X-CSRFToken"))),
        ),
    ],
    ids=["django", "flask-wtf"],
)
def test_the_csrf_setting_reads_as_written(text: str, csrf: Csrf) -> None:
    assert parse_csrf(text) == csrf and csrf.words() == text


@pytest.mark.parametrize(
    "text",
    ["cookie:csrftoken", "header:x=cookie:y", "form:=field:a", "form:a=field:", "form:a=body:b"],
)
def test_a_bad_csrf_setting_is_one_line_with_its_syntax(text: str) -> None:
    with pytest.raises(LabError, match="expected SOURCE:NAME=TARGET:NAME"):
        parse_csrf(text)


@pytest.mark.parametrize("text", ["/login", "DELETE /login", "POST login", "POST /a b"], ids=str)
def test_a_bad_login_route_is_one_line(text: str) -> None:
    if text == "/login":  # the method defaults to POST
        assert parse_login(text).label == "POST /login"
        return
    with pytest.raises(LabError, match="expected METHOD /PATH"):
        parse_login(text)


def test_login_options_without_login_are_refused_in_one_line() -> None:
    with pytest.raises(LabError, match="--csrf: only with --login"):
        login_of({"csrf": DJANGO_CSRF})
    assert login_of({"login": None}) is None


def test_a_form_login_gets_its_content_type_and_a_json_one_its_own() -> None:
    form = parse_login("POST /login", GOOD, csrf="form:t=field:t").request("abc")
    assert form == (f"{GOOD}&t=abc", {"Content-Type": "application/x-www-form-urlencoded"})
    body, headers = parse_login("POST /api/login", '{"user": "a"}', csrf="form:t=field:t").request(
        "x"
    )
    assert json.loads(body or "") == {"user": "a", "t": "x"}
    assert headers == {"Content-Type": "application/json"}


def test_a_start_message_carries_its_login_to_every_generator_process() -> None:
    """The record travels as JSON (`Start.to_json`) and comes back whole, CSRF setting included,
    as each generator process and each share of a step reads it."""
    start = Start("http://127.0.0.1:1", "/me", 0.5, 1.0, 5.0, users=2, login=login("django"))
    assert Start.from_json(start.to_json()) == start
    assert Start.from_json(Start("http://127.0.0.1:1", "/", 0.5, 1.0, 5.0).to_json()).login is None


NAMES = st.from_regex(r"[a-z_]{1,12}", fullmatch=True)
VALUES = st.text(st.characters(blacklist_categories=("Cs", "Cc")), max_size=40)


@given(name=NAMES, value=VALUES, before=st.booleans(), noise=st.lists(NAMES, max_size=3))
def test_the_form_token_is_found_whatever_the_attributes_order(
    name: str, value: str, before: bool, noise: list[str]
) -> None:
    quoted = value.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;")
    attrs = [f'name="{name}"', f'value="{quoted}"', 'type="hidden"']
    attrs = attrs[::-1] if before else attrs
    others = "".join(f'<input name="{n}x" value="no">' for n in noise)
    page = f"<form>{others}<input {' '.join(attrs)}></form>"
    assert form_token(page, name) == value


@given(fields=st.dictionaries(NAMES, VALUES, max_size=3), token=VALUES)
def test_a_field_added_to_a_form_keeps_every_other_field(
    fields: dict[str, str], token: str
) -> None:
    from urllib.parse import parse_qsl, urlencode

    body = with_fields(urlencode(fields) or None, {"csrf_token": token})
    assert dict(parse_qsl(body, keep_blank_values=True)) == {**fields, "csrf_token": token}


@pytest.fixture(scope="module")
def sites(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """Both apps, each on a threaded server of one process (so its count of sessions is whole)."""
    env = app_env(tmp_path_factory.mktemp("logindb"))
    subprocess.run([sys.executable, "-m", "djauth.setup"], env=env, cwd=APPS, check=True)
    urls, servers = {}, []
    for name, target in (("flask", "flaskauth:app"), ("django", "djauth.wsgi:application")):
        port = procs.free_port()
        module, attr = target.split(":")
        code = (
            f"from werkzeug.serving import run_simple; from {module} import {attr} as app; "
            f"run_simple('127.0.0.1', {port}, app, threaded=True)"
        )
        server = subprocess.Popen(
            [sys.executable, "-c", code], env=env, cwd=APPS, stderr=subprocess.DEVNULL
        )
        servers.append(server)
        urls[name] = f"http://127.0.0.1:{port}"
        wait_answer(f"{urls[name]}/{'health/' if name == 'django' else 'health'}", server)
    yield urls
    for server in servers:
        server.terminate()
        server.wait(timeout=10)


def app_env(db_dir: Path) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(APPS),
        "LOGIN_DB": str(db_dir / "login.sqlite3"),
        "DJANGO_SETTINGS_MODULE": "djauth.settings",
    }


def login(site: str, body: str = GOOD) -> Login:
    route, csrf, *_ = SITES[site]
    return parse_login(route, body, csrf=csrf)


def sessions_seen(url: str, site: str) -> int:
    return int(seen(url, site)["sessions"])


def seen(url: str, site: str) -> dict[str, Any]:
    with urllib.request.urlopen(url + SITES[site][4], timeout=10) as answer:
        return dict(json.load(answer))


@pytest.mark.parametrize("site", ["flask", "django"])
def test_the_check_logs_in_and_its_routes_carry_the_session(
    sites: dict[str, str], site: str
) -> None:
    session = logincheck.log_in(sites[site], login(site))
    assert session.problem == "" and session.token
    _, _, me, notes, _ = SITES[site]
    problem, routes, _, _ = logincheck.logged_in(
        sites[site], login(site), (Route("GET", me), Route("POST", notes)), (), None
    )
    assert problem == ""
    for route in routes:
        status, _, _ = logincheck.send(
            sites[site], route.method, route.path, b"", dict(route.headers)
        )
        assert status < 300, (route, status)  # the write passed the CSRF check too


@pytest.mark.parametrize(
    "site,said",
    [
        ("flask", "the login POST /login answered 401: Invalid username or password"),
        (
            "django",
            "the login POST /accounts/login/ answered 200: Log in | lab test site; it set no "
            "session cookie",
        ),
    ],
    ids=["flask-401", "django-form-again"],
)
def test_a_wrong_password_is_refused_with_the_status_and_first_line(
    sites: dict[str, str], site: str, said: str
) -> None:
    assert logincheck.log_in(sites[site], login(site, BAD)).problem.startswith(said)


@pytest.mark.parametrize(
    "site,mode,generators",
    [
        ("flask", "closed", 1),
        ("django", "closed", 1),
        ("django", "open", 1),
        ("flask", "open", 2),
        ("django", "closed", 2),
    ],
    ids=[
        "flask-closed",
        "django-closed",
        "django-open",
        "flask-open-2-generators",
        "django-closed-2-generators",
    ],
)
def test_n_users_are_n_sessions_and_their_logins_are_counted_apart(
    sites: dict[str, str], site: str, mode: str, generators: int, tmp_path: Path
) -> None:
    url, (_, _, me, notes, _) = sites[site], SITES[site]
    mix: list[dict[str, Any]] = [
        {"label": me, "method": "GET", "path": me, "weight": 3},
        {"label": f"POST {notes}", "method": "POST", "path": notes, "weight": 1},
    ]
    users = 4
    load: dict[str, Any] = (
        {"users": users} if mode == "closed" else {"rate_rps": 40.0, "max_outstanding": users}
    )
    start = Start(
        url,
        me,
        0.5,
        1.0,
        10.0,
        **load,
        generators=generators,
        login=login(site),
        mix=mix,
        body="n=1",
    )
    before = sessions_seen(url, site)
    done = run_step(start, tmp_path / "loadgen.log")
    assert done.login["requests"] == users and done.login["ok"] == users, done.login
    # every request logged in and every write past the app's CSRF check (no 4xx); arrivals the
    # cap kept back on a busy machine are no error of the session
    assert set(done.errors) <= {"dropped"} and done.ok > 0, done.errors
    assert sessions_seen(url, site) - before == users
    assert done.requests == sum(r["requests"] for r in done.routes.values())  # logins apart


@pytest.mark.parametrize("mode,generators", [("closed", 1), ("open", 2)], ids=str)
def test_a_login_body_with_user_gives_each_user_its_own_account(
    sites: dict[str, str], mode: str, generators: int, tmp_path: Path
) -> None:
    """`username=user{user}`: each simulated user logs in as its own account (user0, user1, ...),
    numbered across generator processes, and the check as user0."""
    url, users = sites["flask"], 4
    own = login("flask", "username=user{user}&password=secret")
    assert logincheck.log_in(url, placeholders.login_as(own, placeholders.CHECK, 0)).problem == ""
    load: dict[str, Any] = (
        {"users": users} if mode == "closed" else {"rate_rps": 40.0, "max_outstanding": users}
    )
    start = Start(url, "/me", 0.5, 1.0, 10.0, **load, generators=generators, login=own)
    before = seen(url, "flask")["users"]
    done = run_step(start, tmp_path / "loadgen.log")
    assert done.login["ok"] == users and done.ok > 0, done.login
    after = seen(url, "flask")["users"]
    moved = {name for name, n in after.items() if n > before.get(name, 0)}
    assert moved == {f"user{i}" for i in range(users)}, after


def test_an_unknown_placeholder_in_a_login_is_one_line() -> None:
    with pytest.raises(LabError, match="the login POST /login"):
        login_of({"login": "POST /login", "login_body": "user={who}"})


def test_a_mix_files_login_route_is_the_login_and_not_beside_login() -> None:
    route = Route("POST", "/accounts/login/", BAD, (("X-Lab", "1"),))
    login = login_of({"csrf": DJANGO_CSRF}, route)
    assert login is not None and (login.label, login.body) == ("POST /accounts/login/", BAD)
    assert login.headers == (("X-Lab", "1"),) and login.csrf == parse_csrf(DJANGO_CSRF)
    with pytest.raises(LabError, match="--login and the mix file's login = true route"):
        login_of({"login": "POST /login"}, route)


def _login_given(how: str, tmp_path: Path) -> tuple[str, ...]:
    """The wrong password as `--login` gives it, or as a mix file's `login = true` route."""
    if how == "--login":
        return ("--path", "/me/", "--login", "POST /accounts/login/", "--login-body", BAD)
    mix = tmp_path / "mix.toml"
    mix.write_text(
        f'[[route]]\nmethod = "POST"\npath = "/accounts/login/"\nbody = "{BAD}"\nlogin = true\n'
        '[[route]]\npath = "/me/"\nweight = 1\n'
    )
    return ("--mix", str(mix))


@pytest.mark.parametrize("how", ["--login", "mix file"], ids=str)
def test_a_lab_run_refuses_a_wrong_password_before_any_load(how: str, tmp_path: Path) -> None:
    """The real `lab run --app` path: the check under a model refuses the app, exit 1, with the
    login's answer quoted, and measures nothing; the login given either way."""
    env = app_env(tmp_path)
    subprocess.run([sys.executable, "-m", "djauth.setup"], env=env, cwd=APPS, check=True)
    argv = lab_cli(
        *("run", "--app", "djauth.wsgi:application", "--app-dir", str(APPS), "--check-only"),
        *(
            "--env",
            f"LOGIN_DB={env['LOGIN_DB']}",
            "--env",
            "DJANGO_SETTINGS_MODULE=djauth.settings",
        ),
        *(
            "--path",
            "/health/",
            "--models",
            "uwsgi-threads",
            "--out",
            str(tmp_path / "out"),
        ),
        *_login_given(how, tmp_path),
        *("--csrf", DJANGO_CSRF),
    )
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    said = " ".join((done.stdout + done.stderr).split())
    assert "the login POST /accounts/login/ answered 200: Log in | lab test site" in said
    assert not list((tmp_path / "out").glob("*/steps.jsonl"))


def test_a_lab_run_logs_each_user_in_and_reports_the_logins_apart(tmp_path: Path) -> None:
    """The real `lab run --app` sweep, open loop: oha cannot log in, so the lab's engine sends
    the step and says why; the record's evidence and the summary line count the logins. /me,
    first, answers 401 when polled for readiness without a session: the server has started."""
    run, done = lab_run(
        tmp_path,
        *("--app", "flaskauth:app", "--app-dir", str(APPS), "--path", "/me", "--path", "/health"),
        *("--login", "POST /login", "--login-body", GOOD, "--csrf", FLASK_CSRF),
        *("--mode", "open", "--rates", "20", "--max-outstanding", "3", "--models", "uwsgi-threads"),
        *("--knob", "concurrency=4", "--duration", "2", "--warmup", "0"),
    )
    (step,) = step_rows(run)
    assert step["details"]["login"]["logins"] == 3 and step["details"]["login"]["ok"] == 3
    assert "a login per user (POST /login)" in step["details"]["engine"]["why"]
    # every request logged in (no 4xx); arrivals the cap kept back on a busy machine are no error
    assert set(step["errors"]) <= {"dropped"} and step["ok"] > 0, step["errors"]
    assert "logins 3 (0 failed" in done.stderr  # the step's summary line


@pytest.mark.parametrize(
    "site,kind", [("flask", "http_4xx"), ("django", "no_session")], ids=["flask-401", "django-200"]
)
def test_a_failed_login_is_counted_by_its_kind_never_as_a_request(
    sites: dict[str, str], site: str, kind: str, tmp_path: Path
) -> None:
    """The check refuses such an app before any load; a generator given one anyway (a password
    changed mid-run) counts each user's failed login apart, and the users go on anonymous."""
    url, me = sites[site], SITES[site][2]
    start = Start(url, me, 0.3, 1.0, 10.0, users=2, login=login(site, BAD))
    done = run_step(start, tmp_path / "loadgen.log")
    assert done.login["requests"] == 2 and done.login["errors"] == {kind: 2}


@pytest.mark.parametrize(
    "figures,said",
    [
        ({}, ""),
        ({"login": {"logins": 4, "ok": 4, "errors": {}}}, ""),
        (
            {"login": {"logins": 4, "ok": 1, "errors": {"no_session": 2, "http_500": 1}}},
            "3 of 4 logins failed (http_500 1, no_session 2): those users sent their requests "
            "without a session",
        ),
    ],
    ids=["no-login", "all-logged-in", "three-failed"],
)
def test_a_step_whose_logins_failed_says_so_for_its_flag(
    figures: dict[str, Any], said: str
) -> None:
    """`login_failed` (excluding): users without a session measured another path of the app."""
    from lab.record import flags
    from lab.record.login import failures

    assert failures(figures) == said
    assert flags.declared("login_failed").excludes
