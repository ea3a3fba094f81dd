"""`--har FILE`: a browser's export read into the mix; every entry kept or counted under one reason,
a bad or huge file refused in one line; and one real export, made here by Chromium."""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lab.cli.measure.appmix import render_har, traffic
from lab.config import har
from lab.record.errors import LabError
from tests.helpers import lab_cli
from tests.uibrowser import CHROMIUM, needs_chromium


def entry(url: str, method: str = "GET", status: int = 200, **more: Any) -> dict[str, Any]:
    request = {"method": method, "url": url, "headers": more.pop("headers", [])}
    if "body" in more:
        request["postData"] = {"mimeType": "application/json", "text": more.pop("body")}
    mime = more.pop("mime", "application/json")
    return {"request": request, "response": {"status": status, "content": {"mimeType": mime}}}


def document(*entries: dict[str, Any]) -> dict[str, Any]:
    return {"log": {"version": "1.2", "entries": list(entries)}}


FIXTURE = HealthCheck.function_scoped_fixture
APP = "http://app.test:8000"
HEADERS = [
    {"name": "Cookie", "value": "session=abc"},
    {"name": "Authorization", "value": "Bearer t"},
    {"name": "Connection", "value": "keep-alive"},
    {"name": ":authority", "value": "app.test"},
    {"name": "Content-Type", "value": "application/json"},
    {"name": "X-Trace", "value": "{x}"},
]
EXAMPLE = document(
    entry(f"{APP}/api/orders?page=2#top"),
    entry(f"{APP}/api/orders?page=2"),
    entry(f"{APP}/api/orders", "POST", 201, headers=HEADERS, body='{"sku": "{a}"}'),
    entry(f"{APP}/static/app.js", mime="application/javascript"),
    entry(f"{APP}/logo.png", mime="image/png"),
    entry("https://other.test/api/v1"),
    entry(f"{APP}/api/missing", status=404),
    entry(f"{APP}/api/cancelled", status=0),
    entry("ws://app.test:8000/live", status=101),
    entry(f"{APP}/api/orders", "OPTIONS", 204),
    entry(f"{APP}/api/upload", "POST", 201, body="x" * (har.MAX_BODY_BYTES + 1)),
    {"request": {"method": "GET"}},
)


def test_one_hosts_requests_become_the_mix_and_the_rest_is_counted_by_reason() -> None:
    found = har.read_mix(EXAMPLE, "x.har")
    assert found.host == "app.test:8000"
    assert [(r.label, w) for r, w in found.routes] == [
        ("/api/orders?page=2", 2.0),
        ("POST /api/orders", 1.0),
    ]
    assert found.left_out == {
        "static": 2,
        "host": 1,
        "status": 1,
        "failed": 1,
        "websocket": 1,
        "unsendable": 1,
        "unreadable": 1,
        "large": 1,
    }
    assert found.kept + sum(found.left_out.values()) == found.entries
    post = found.routes[1][0]
    assert dict(post.headers) == {"Content-Type": "application/json", "X-Trace": "{{x}"}
    assert post.body == '{"sku": "{{a}"}'  # sent as recorded: no placeholder in it
    kept = har.read_mix(EXAMPLE, "x.har", keep=("cookie", "authorization")).routes[1][0]
    assert {"Cookie", "Authorization"} <= dict(kept.headers).keys()
    assert har.read_mix(EXAMPLE, "x.har", host="other.test").routes[0][0].label == "/api/v1"


def test_the_har_mix_is_printed_before_any_load(tmp_path: Path) -> None:
    path = tmp_path / "s.har"
    path.write_text(json.dumps(EXAMPLE))
    given = {"app_paths": (), "app_body": None, "app_headers": (), "probe_path": None}
    found = traffic({**given, "har": path})
    assert [m.label for m in found.mix] == ["/api/orders?page=2", "POST /api/orders"]
    assert found.mix[1].body == '{"sku": "{{a}"}'
    assert found.har is not None
    kept, left = render_har(found.har)
    assert kept.row_count == 2 and left.row_count == 8
    with pytest.raises(LabError, match="--har-host: only with --har"):
        traffic({**given, "app_paths": ("/a",), "har_host": "x"})


@pytest.mark.parametrize(
    "content,said",
    [
        (b"", "not a JSON document"),
        (b"\xff\xfe\x00junk", "not a JSON document"),
        (b"[1, 2]", "not a HAR file"),
        (b'{"log": {"entries": {}}}', "not a HAR file"),
        (b"[" * 100_000, "not a JSON document"),
        (json.dumps(document(entry("https://cdn.test/a.css"))).encode(), "no request of host"),
    ],
    ids=["empty", "binary", "a-list", "entries-not-a-list", "nested-deep", "nothing-to-load"],
)
def test_a_bad_har_file_is_one_line(tmp_path: Path, content: bytes, said: str) -> None:
    path = tmp_path / "bad.har"
    path.write_bytes(content)
    with pytest.raises(LabError) as e:
        har.read_file(path)
    assert said in str(e.value) and "\n" not in str(e.value)


def test_a_huge_har_file_is_refused_unread(tmp_path: Path, monkeypatch: Any) -> None:
    path = tmp_path / "huge.har"
    path.write_text(json.dumps(EXAMPLE))
    monkeypatch.setattr(har, "MAX_HAR_BYTES", 100)
    with pytest.raises(LabError, match="larger than 100 bytes"):
        har.read_file(path)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=10,
)
URLS = st.sampled_from(
    ["http://a.test/x", "https://a.test/p?q=1", "ws://a.test/s", "http://b.test/y.css", "/rel"]
) | st.text(max_size=20)
ENTRIES = st.builds(
    entry,
    URLS,
    st.sampled_from(["GET", "POST", "PUT", "HEAD", "get", ""]),
    st.sampled_from([0, 101, 200, 201, 304, 404, 500, -1]),
    headers=st.lists(st.fixed_dictionaries({"name": st.text(max_size=8), "value": JSON})),
    body=st.text(max_size=30),
    mime=st.sampled_from(["text/html", "image/png", "text/css", "application/json"]),
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(entries=st.lists(ENTRIES | JSON, max_size=12), host=st.sampled_from(["", "a.test"]))
def test_every_entry_is_kept_or_counted_once_whatever_it_holds(
    entries: list[Any], host: str
) -> None:
    found = har.read_mix(document(*entries), "g.har", host)
    assert found.kept + sum(found.left_out.values()) == len(entries) == found.entries
    assert set(found.left_out) <= set(har.REASONS)
    for route, _ in found.routes:
        assert route.path.startswith("/") and " " not in route.path


@settings(max_examples=150, deadline=None, suppress_health_check=[FIXTURE])
@given(content=st.binary(max_size=200) | JSON.map(lambda j: json.dumps(j).encode()))
def test_junk_is_a_one_line_error_or_a_mix_never_a_traceback(
    tmp_path: Path, content: bytes
) -> None:
    path = tmp_path / "junk.har"  # one file, rewritten by every example
    path.write_bytes(content)
    try:
        har.read_file(path)
    except LabError as e:
        assert "\n" not in str(e)


class Quiet(WSGIRequestHandler):
    def log_message(self, *_: Any) -> None:
        pass


PAGE = b"""<!doctype html><html><head><link rel="stylesheet" href="/static/site.css"></head>
<body><p id="done">...</p><script>
fetch('/api/items?page=1').then(() => fetch('/api/orders', {method: 'POST',
  headers: {'Content-Type': 'application/json'}, body: JSON.stringify({sku: 'a', qty: 2})}))
  .then(() => { document.getElementById('done').textContent = 'done'; });
</script></body></html>"""


@pytest.fixture(scope="module")
def shop() -> Iterator[str]:
    """A tiny real WSGI app: a page, its stylesheet, a JSON read and a JSON write."""

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        path = environ["PATH_INFO"]
        if path == "/":
            start_response("200 OK", [("Content-Type", "text/html")])
            return [PAGE]
        if path == "/static/site.css":
            start_response("200 OK", [("Content-Type", "text/css")])
            return [b"p { color: teal }"]
        environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
        start_response("200 OK", [("Content-Type", "application/json")])
        return [b'{"ok": true}']

    server = make_server("127.0.0.1", 0, app, handler_class=Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()


@needs_chromium
def test_a_real_chromium_export_is_read_back_as_the_mix(shop: str, tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    path = tmp_path / "session.har"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        context = browser.new_context(record_har_path=str(path))
        page = context.new_page()
        page.goto(shop + "/")
        page.wait_for_function("document.getElementById('done').textContent === 'done'")
        context.close()  # writes the HAR
        browser.close()
    found = har.read_file(path)
    labels = {r.label: r for r, _ in found.routes}
    assert set(labels) == {"/", "/api/items?page=1", "POST /api/orders"}
    order = labels["POST /api/orders"]
    assert json.loads(order.body or "") == {"sku": "a", "qty": 2}
    assert any("application/json" in v for k, v in order.headers if k.lower() == "content-type")
    assert found.left_out.get("static") == 1  # the stylesheet
    assert found.host == shop.removeprefix("http://")


@pytest.mark.parametrize(
    "option,content,said",
    [
        ("--har", "not json", "not a JSON document"),
        ("--mix", '[[route]]\npath = "/a/{id}"\n', "unknown placeholder {id}"),
    ],
    ids=["har", "mix"],
)
def test_lab_run_refuses_a_bad_file_in_one_line_before_anything_runs(
    tmp_path: Path, option: str, content: str, said: str
) -> None:
    given = tmp_path / "given"
    given.write_text(content)
    out = tmp_path / "out"
    argv = lab_cli("run", "--app", "x:app", option, str(given), "--out", str(out))
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and said in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and not out.exists()


def test_a_captured_login_is_left_out_and_headers_naming_the_recorded_server_dropped() -> None:
    """With --login, the session's own login (its form's GET and its POST) is the users' login,
    sent once each, not part of the mix; an Origin or Referer naming the recorded server would
    name the wrong host and port on the lab's (Django's CSRF check refuses such a write), while
    one naming another site is the page's own and kept."""
    origin = [{"name": "Origin", "value": APP}, {"name": "Referer", "value": f"{APP}/list"}]
    elsewhere = [{"name": "Referer", "value": "https://search.test/?q=shop"}]
    found = har.read_mix(
        document(
            entry(f"{APP}/login/?next=/list"),
            entry(f"{APP}/login/?next=/list", "POST", 302, body="username=a&password=b"),
            entry(f"{APP}/list", headers=elsewhere),
            entry(f"{APP}/done/5/", "POST", 302, headers=origin),
        ),
        "s.har",
        login_path="/login/",
    )
    assert found.left_out == {"login": 2}
    assert [r.label for r, _ in found.routes] == ["/list", "POST /done/5/"]
    assert found.routes[0][0].headers == (("Referer", "https://search.test/?q=shop"),)
    assert found.routes[1][0].headers == ()
    assert har.REASONS["login"].startswith("the login's path")
