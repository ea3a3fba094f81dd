"""A production-shaped app built by its factory (`--app 'shop:create_app()'`), under every server.

The app is tests/prodapp/shop: a Flask factory that reads settings.json relative to its own
directory, builds a SQLAlchemy engine from DATABASE_URL and connects while it is built, and logs
each build's process id to var/built.log. Each test copies it, so its relative writes stay out of
the checkout.
"""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
from keyword import iskeyword
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lab.config.userapp import parse_target
from lab.record.errors import LabError
from tests.helpers import lab_cli

SHOP = Path(__file__).parent / "prodapp"
# one model per server the lab runs a WSGI app under; uvicorn through the declared bridge
EVERY_SERVER = "uwsgi-threads,gunicorn-gthread,granian-wsgi,uvicorn"
LITERALS = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8) | st.binary(max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=6,
)


@pytest.fixture()
def shop(tmp_path: Path) -> Path:
    shutil.copytree(SHOP, tmp_path / "app")
    return tmp_path / "app"


def check(shop: Path, out: Path, target: str, *args: str) -> subprocess.CompletedProcess[str]:
    argv = lab_cli(
        *("run", "--app", target, "--app-dir", str(shop), "--env", "DATABASE_URL={postgres_url}"),
        *("--path", "/health", "--knob", "concurrency=2", "--check-only", "--out", str(out)),
        *args,
    )
    return subprocess.run(argv, capture_output=True, text=True, timeout=240)


@pytest.mark.parametrize(
    ("target", "name", "call"),
    [
        ("shop:create_app()", "shop:create_app", ((), {})),
        ("shop:app", "shop:app", None),
        ("a.b:make( 'prod' , debug=False, n=[1, {'k': None}])", "a.b:make", (("prod",), None)),
        ("shop:create_app(b'x', -2.5)", "shop:create_app", ((b"x", -2.5), {})),
    ],
    ids=["no-arguments", "an-app-object", "positional-and-keywords", "bytes-and-negative"],
)
def test_a_factory_and_its_literal_arguments_are_parsed(
    target: str, name: str, call: tuple[tuple[object, ...], dict[str, object] | None] | None
) -> None:
    got_name, args = parse_target(target)
    assert got_name == name
    if call is None:
        assert args == ""
        return
    got_args, got_kwargs = ast.literal_eval(args)
    assert got_args == call[0] and (call[1] is None or got_kwargs == call[1])


@pytest.mark.parametrize(
    "target",
    [
        "shop:create_app(__import__('os'))",
        "shop:create_app(*args)",
        "shop:create_app(**{'a': 1})",
        "shop:create_app()()",
        "shop:create_app() + 1",
        "shop:create_app(1e999)",
        "shop:create_app(x=",
        "shop",
        "shop:1app",
    ],
    ids=["a-call", "star-args", "star-kwargs", "called-twice", "an-expression", "inf", "unclosed"]
    + ["no-attribute", "bad-name"],
)
def test_anything_but_literal_arguments_is_refused_in_one_line(target: str) -> None:
    with pytest.raises(LabError, match=r"literals|expected package\.module:attribute") as caught:
        parse_target(target)
    assert "\n" not in str(caught.value)


# A keyword argument's name: an identifier, never one of Python's keywords (`as=1` is no call).
KEYWORD_ARGUMENT = st.from_regex(r"\A[a-z_][a-z0-9_]{0,5}\Z").filter(lambda k: not iskeyword(k))


@settings(max_examples=100, deadline=None)
@given(
    args=st.lists(LITERALS, max_size=3),
    kwargs=st.dictionaries(KEYWORD_ARGUMENT, LITERALS, max_size=3),
)
def test_any_literal_arguments_reach_the_factory_as_given(
    args: list[object], kwargs: dict[str, object]
) -> None:
    """What the servers' wrapper (servers/user_factory.py) reads back is what the user wrote."""
    call = ", ".join([*map(repr, args), *(f"{k}={v!r}" for k, v in kwargs.items())])
    _, text = parse_target(f"pkg.mod:create_app({call})")
    assert ast.literal_eval(text) == (tuple(args), kwargs)


def test_a_factory_is_built_once_in_every_server_process_in_the_apps_directory(
    shop: Path, tmp_path: Path
) -> None:
    """uWSGI, gunicorn, Granian and uvicorn (bridged) each build the app in the process that
    serves it (/built answers 500 otherwise): once for the import check, once per model, never
    in uWSGI's master; settings.json and var/ are found relative to the app's directory; the
    import check and the servers reach the run's real PostgreSQL as the factory connects."""
    done = check(
        shop,
        tmp_path / "out",
        "shop:create_app('lab', pool_size=3)",
        "--path",
        "/built",
        "--models",
        EVERY_SERVER,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(next((tmp_path / "out").glob("*/appcheck.json")).read_text())
    for model in result["models"]:
        assert model["answers"]["/built"]["status"] == 200, model
    builds = (shop / "var" / "built.log").read_text().split("\n")[:-1]
    assert len(builds) == 1 + len(EVERY_SERVER.split(",")), builds
    assert len({line.split()[0] for line in builds}) == len(builds)  # each in its own process
    assert all(line.split()[1] == "lab" for line in builds)


@pytest.mark.parametrize(
    ("target", "message"),
    [
        (
            "shop:create_app",
            "create_app is a function that builds the app (a factory), not a "
            "WSGI or ASGI app; call it: --app 'shop:create_app()'",
        ),
        ("shop:broken_factory()", "the factory raised RuntimeError: SECRET_KEY is not set"),
        ("shop:create_app(open('x'))", "a factory's arguments must be literals"),
    ],
    ids=["factory-without-call", "factory-raises", "not-a-literal"],
)
def test_a_factory_misgiven_or_failing_is_one_line_and_nothing_runs(
    shop: Path, tmp_path: Path, target: str, message: str
) -> None:
    done = check(shop, tmp_path / "out", target, "--models", "uwsgi-threads")
    assert done.returncode == 2 and message in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert not list((tmp_path / "out").glob("*"))  # nothing swept, nothing half-written
