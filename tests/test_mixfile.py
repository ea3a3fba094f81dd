"""A mix file (`--mix FILE`): a method, headers and a body per route, and placeholders filled per
request that never collide, across users, requests, generator processes and steps."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from lab.cli.measure.appmix import traffic
from lab.config import mixfile
from lab.record import placeholders
from lab.record.errors import LabError
from lab.run import engine, writecheck
from lab.run.generator import run_step
from loadgen.protocol import Start
from loadgen.request import Picker
from loadgen.shares import share_out, split
from tests.helpers import MIX_HEALTH_ROUTE, QuietHandler

MIX = (
    MIX_HEALTH_ROUTE
    + """
[[route]]
method = "POST"
path = "/orders"
weight = 5
body = { sku = "{choice:a|b}", email = "u{n}@example.com", id = "{uuid}" }
expect = [201]

[[route]]
method = "PUT"
path = "/profile/{user}"
weight = 2
headers = { Content-Type = "text/plain", X-Run = "{uuid}" }
body = "name={user}"

[[route]]
method = "POST"
path = "/login"
login = true
body_file = "login.json"
"""
)


def opts(**more: Any) -> dict[str, Any]:
    given = {"app_paths": (), "app_body": None, "app_headers": (), "probe_path": None}
    return {**given, **more}


def write(tmp_path: Path, text: str = MIX) -> Path:
    (tmp_path / "login.json").write_text('{"user": "a", "password": "b"}')
    path = tmp_path / "mix.toml"
    path.write_text(text)
    return path


def test_each_route_keeps_its_own_method_headers_and_body(tmp_path: Path) -> None:
    found = traffic(opts(mix_file=write(tmp_path), app_headers=("X-Key: k",)))
    by = {m.label: m for m in found.mix}
    assert list(by) == ["POST /orders", "PUT /profile/{user}"]  # weight 0 and login: not loaded
    orders = by["POST /orders"]
    assert json.loads(orders.body or "")["email"] == "u{n}@example.com"
    assert ("Content-Type", "application/json") in orders.headers  # a table is JSON
    assert ("X-Key", "k") in orders.headers and orders.expect == (201,)  # --header: a default
    profile = by["PUT /profile/{user}"]
    assert ("Content-Type", "text/plain") in profile.headers  # its own content type wins
    assert ("Content-Type", "application/json") not in profile.headers
    assert [r.label for r in found.routes][0] == "/health"  # checked, the health route
    assert found.login is not None and found.login.label == "POST /login"
    assert found.login.body == '{"user": "a", "password": "b"}'
    assert ("Content-Type", "application/json") in found.login.headers  # a JSON string too


def test_body_is_the_default_for_routes_that_give_none(tmp_path: Path) -> None:
    text = '[[route]]\nmethod = "POST"\npath = "/a"\n[[route]]\npath = "/b"\n'
    found = traffic(opts(mix_file=write(tmp_path, text), app_body='{"n": 1}'))
    a, b = found.mix
    assert a.body == '{"n": 1}' and ("Content-Type", "application/json") in a.headers
    assert b.body is None and b.headers == ()  # a GET sends no body, nor its type


@pytest.mark.parametrize(
    "text,said",
    [
        ('[[route]]\npath = "/a"\nverb = "GET"', "unknown key 'verb'"),
        ('[[route]]\nmethod = "GET"\npath = "/a"\nbody = "x"', "a GET route sends no body"),
        ('[[route]]\npath = "/a"\nexpect = [42]', "statuses (100-599)"),
        ('[[route]]\npath = "/a/{id}"', "unknown placeholder {id}"),
        ('[[route]]\npath = "/a/{line:missing.txt}"', "cannot read it"),
        ('[[route]]\npath = "/a/{choice:}"', "needs values"),
        ('[[route]]\npath = "/a"\nweight = 0', "no route with a weight above 0"),
        ('[[route]]\npath = "/a"\n[[route]]\npath = "/a"', "listed twice"),
        ('[[route]]\nmethod = "POST"\npath = "/a"\nbody = "x"\nbody_file = "y"', "not both"),
        ('[[route]]\nmethod = "POST"\npath = "/a"\nbody_file = "nope.json"', "cannot read"),
        ('[[route]]\npath = "/a"\nheaders = { "Bad Name" = "x" }', "is no header"),
        ("[[route]]\nweight = 1", "needs a path"),
        ("[routes]", "unknown key(s) routes"),
        ("route = 1", "no route"),
        ("[[route]\n", "malformed TOML"),
    ],
    ids=[
        "unknown-key",
        "get-body",
        "bad-status",
        "unknown-placeholder",
        "missing-line-file",
        "empty-choice",
        "nothing-loaded",
        "twice",
        "body-and-file",
        "missing-body-file",
        "bad-header",
        "no-path",
        "not-route",
        "not-tables",
        "malformed",
    ],
)
def test_a_bad_mix_file_is_one_line_naming_the_fix(tmp_path: Path, text: str, said: str) -> None:
    with pytest.raises(LabError) as e:
        mixfile.read(write(tmp_path, text), None, ())
    assert said in str(e.value) and "\n" not in str(e.value)


def test_one_source_of_the_mix_at_a_time(tmp_path: Path) -> None:
    with pytest.raises(LabError, match="--mix and --har"):
        traffic(opts(mix_file=write(tmp_path), har=tmp_path / "x.har"))


@pytest.mark.procs  # probes a real binary (tests/tiers.py cannot see it by name)
def test_the_oha_engine_falls_back_naming_bodies_and_placeholders() -> None:
    base = Start("http://127.0.0.1:1", "/", 0.1, 1.0, 1.0, rate_rps=10.0, max_outstanding=2)
    mixed = Start(**{**vars(base), "mix": [{"label": "/a", "method": "GET", "path": "/a"}]})
    assert "body and placeholders" in (engine.cannot(mixed) or "")
    templated = Start(**{**vars(base), "path": "/o/{uuid}"})
    assert "placeholders" in (engine.cannot(templated) or "")
    plain = Start(**{**vars(base), "body": '{"a": {"b": 1}}', "method": "POST"})
    assert engine.cannot(plain) in (None, engine.oha_missing())  # JSON braces are no placeholder


def _route(path: str, body: str | None = None) -> dict[str, Any]:
    return {"label": f"POST {path}", "method": "POST", "path": path, "weight": 1, "body": body}


def _start(users: int, generators: int, base: int) -> Start:
    mix = [_route("/o/{n}", '{"id": "{uuid}", "n": {n}}'), _route("/p/{user}", "k={uuid}")]
    return Start("http://127.0.0.1:1", "/", 0.1, 1.0, 1.0, users=users, mix=mix, n_base=base)


@settings(max_examples=40, deadline=None)
@given(
    users=st.integers(1, 12),
    requests=st.integers(1, 30),
    generators=st.integers(1, 5),
    steps=st.integers(1, 3),
)
def test_uuid_and_n_never_collide_across_users_requests_generators_and_steps(
    users: int, requests: int, generators: int, steps: int
) -> None:
    seen_n: list[str] = []
    seen_uuid: list[str] = []
    sent = 0
    for step in range(steps):  # each step's base: a second after the last began
        base = placeholders.step_base(float(step))
        for share in share_out(_start(users * generators, generators, base), generators, 0.0):
            picker = Picker(share, seed=7)  # a seeded step: its UUIDs still differ
            for user in range(share.user_base, share.user_base + share.users):
                for _ in range(requests):
                    request = picker.next(user)
                    sent += 1
                    if request.path.startswith("/o/"):
                        body = json.loads(request.body or "")
                        assert request.path == f"/o/{body['n']}"  # one value per request
                        seen_n.append(str(body["n"]))
                        seen_uuid.append(body["id"])
                    else:
                        assert request.path == f"/p/{user}"
                        seen_uuid.append((request.body or "").removeprefix("k="))
    assert len(set(seen_n)) == len(seen_n) and len(set(seen_uuid)) == len(seen_uuid)
    assert all(uuid.UUID(u).version == 4 for u in seen_uuid) and sent <= placeholders.N_PER_SECOND


def test_users_are_numbered_across_generators_in_both_loops() -> None:
    closed = share_out(_start(10, 3, 0), 3, 0.0)
    assert [(s.user_base, s.users) for s in closed] == [(0, 4), (4, 3), (7, 3)]
    base = Start("http://127.0.0.1:1", "/", 0.1, 1.0, 1.0, rate_rps=90.0, max_outstanding=7)
    opened = split(base, 3, 0.0)
    assert [(s.user_base, s.max_outstanding, s.n_index, s.n_stride) for s in opened] == [
        (0, 3, 0, 3),
        (3, 2, 1, 3),
        (5, 2, 2, 3),
    ]


JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=8,
)


@settings(max_examples=150, deadline=None)
@given(path=st.text(max_size=40), body=JSONISH.map(json.dumps) | st.text(max_size=60))
def test_a_template_without_placeholders_is_sent_byte_identical(path: str, body: str) -> None:
    path = "/" + path.replace("\r", "").replace("\n", "")
    if placeholders.found(path) or placeholders.found(body):
        return
    route = {"label": "POST /x", "method": "POST", "path": path, "weight": 1, "body": body}
    request = Picker(Start("http://127.0.0.1:1", "/", 0.1, 1.0, 1.0, mix=[route])).next(3)
    assert request.path is path and request.body is body  # the very same strings


@settings(max_examples=150, deadline=None)
@given(text=st.text(max_size=60))
@example(text="{A")  # found by Hypothesis: a capital after a brace starts a token (refused)
@example(text="{orderId}")
def test_a_recorded_text_made_literal_is_sent_as_it_was(text: str) -> None:
    template = placeholders.compile_text(placeholders.literal(text), "a HAR body")
    assert placeholders.Values(placeholders.Source(), 0).fill(template) == text
    route = {"label": "POST /x", "method": "POST", "path": "/x", "weight": 1}
    route["body"] = placeholders.literal(text)
    request = Picker(Start("http://127.0.0.1:1", "/", 0.1, 1.0, 1.0, mix=[route])).next(0)
    assert request.body == text


def test_filled_values_are_escaped_where_they_land(tmp_path: Path) -> None:
    ids = tmp_path / "ids.txt"
    ids.write_text('a b\n"q"\n')
    source = placeholders.Source(seed=1)
    path = placeholders.compile_text(f"/s?q={{line:{ids}}}", "p", "path")
    body = placeholders.compile_text(f'{{"q": "{{line:{ids}}}"}}', "b", "json")
    for _ in range(10):
        values = placeholders.Values(source, 0)
        assert " " not in values.fill(path) and '"' not in values.fill(path)
        assert json.loads(values.fill(body))["q"] in ("a b", '"q"')


class Quiet(WSGIRequestHandler):
    def log_message(self, *_: Any) -> None:
        pass


@pytest.fixture(scope="module")
def unique_app() -> Iterator[str]:
    """A WSGI app whose POST /users keeps each email unique: 201 once, 409 after."""
    taken: set[bytes] = set()

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        size = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(size)
        status = "409 Conflict" if body in taken else "201 Created"
        taken.add(body)
        start_response(status, [("Content-Type", "text/plain")])
        return [b"email taken\n" if status.startswith("409") else b"made\n"]

    server = make_server("127.0.0.1", 0, app, handler_class=Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()


@pytest.mark.parametrize(
    "body,named",
    [('{"email": "a@example.com"}', True), ('{"email": "u{n}@example.com"}', False)],
    ids=["fixed-body-collides", "placeholder-unique"],
)
def test_a_write_that_fails_when_repeated_is_named_with_the_fix(
    unique_app: str, body: str, named: bool
) -> None:
    route = mixfile.userapp.parse_routes(("POST /users",), body, ())[0]
    found = writecheck.failed_again((route,), writecheck.sent_twice(unique_app, (route,)))
    assert bool(found) == named
    if named:
        said = found["POST /users"]
        assert "201" in said and "409 (email taken)" in said and "{uuid}" in said


class Recording(QuietHandler):
    """Keeps what every request sent: method, path, headers, body; answers 201 to /orders."""

    protocol_version = "HTTP/1.1"
    seen: list[tuple[str, str, dict[str, str], bytes]] = []

    def record(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        Recording.seen.append((self.command, self.path, dict(self.headers), body))
        self.answer(b"ok", 201 if self.path == "/orders" else 200)

    do_POST = do_PUT = record


@pytest.mark.parametrize(
    "load",
    [{"users": 4}, {"rate_rps": 150.0, "max_outstanding": 6}],
    ids=["closed-loop", "open-loop"],
)
def test_a_step_on_two_generators_sends_each_routes_own_request(
    tmp_path: Path, load: dict[str, Any]
) -> None:
    """A real step on two generator processes: each route's method, headers and body, and {n}
    unique across both processes; /orders answers 201, which its `expect` counts a success."""
    Recording.seen = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Recording)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    orders = _route("/orders", '{"n": {n}, "id": "{uuid}"}')
    orders["headers"] = [["Content-Type", "application/json"], ["X-User", "{user}"]]
    orders["expect"] = [201]
    mix = [orders, {**_route("/p/{n}", "plain"), "method": "PUT", "label": "PUT /p/{n}"}]
    url = f"http://127.0.0.1:{server.server_address[1]}"
    start = Start(url, "/", 0.2, 1.0, 5.0, generators=2, mix=mix, n_base=1000, **load)
    try:
        done = run_step(start, tmp_path / "gen.log")
    finally:
        server.shutdown()
    assert done.ok == done.requests > 20 and not done.errors, done.errors
    numbers = []
    for method, path, headers, body in Recording.seen:
        if path == "/orders":
            sent = json.loads(body)
            assert method == "POST" and headers["Content-Type"] == "application/json"
            assert 0 <= int(headers["X-User"]) < 6
            numbers.append(sent["n"])
        else:
            assert method == "PUT" and body == b"plain" and "Content-Type" not in headers
            numbers.append(int(path.removeprefix("/p/")))
    assert len(numbers) == len(set(numbers)) and min(numbers) >= 1000
    assert {n % 2 for n in numbers} == {0, 1}  # both generators sent, each its own stride


@given(bits=st.integers(0, 2**128 - 1))
def test_a_uuid_is_written_as_the_standard_library_writes_it(bits: int) -> None:
    assert placeholders.uuid4(bits) == str(uuid.UUID(int=bits, version=4))


def test_the_health_route_is_the_first_get_without_placeholders() -> None:
    routes = mixfile.userapp.parse_routes(("/items/{n}", "/health", "POST /a"), None, ())
    assert mixfile.userapp.health_route(routes).path == "/health"
    with pytest.raises(LabError, match="a GET --path without placeholders"):
        mixfile.userapp.health_route(routes[:1])


def test_a_mix_too_big_for_a_generators_start_message_is_refused(tmp_path: Path) -> None:
    big = '[[route]]\nmethod = "POST"\npath = "/a"\nbody = "' + "x" * 120_000 + '"\n'
    with pytest.raises(LabError, match=r"add up to \d+ bytes, .* the biggest is POST /a"):
        traffic(opts(mix_file=write(tmp_path, big)))
