"""The lab page's Save run button in a real browser: whatever /lab/save answers (a saved run, a
refusal, an HTTP error with or without the lab's JSON, no answer at all), #saved says it in one
line, never nothing. The page is lab/webui/templates/lab.html as served; the server behind it is
a small stand-in answering each way, since a locust that fails on purpose is slow and rare.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from typing import Any, ClassVar

import pytest
from uibrowser import CHROMIUM, ROOT, needs_chromium

from tests.helpers import QuietHandler

pytest.importorskip("playwright.sync_api")

PAGE = (ROOT / "lab" / "webui" / "templates" / "lab.html").read_bytes()
DATA = {"models": [], "upstream": {}, "client_cpu_pct": 0, "delay_ms": 50}
DATA |= {"distribution": "constant", "route": "/io", "saved": [], "history": []}
FLASK_500 = (  # what Flask answers for an exception no handler catches
    b"<!doctype html>\n<html lang=en>\n<title>500 Internal Server Error</title>\n"
    b"<h1>Internal Server Error</h1>\n<p>The server encountered an internal error.</p>\n"
)


class Lab(QuietHandler):
    """/lab/ and /lab/data as the page needs them; /lab/save answers `save` (status, body)."""

    save: ClassVar[tuple[int, bytes]] = (200, b"")

    def do_GET(self) -> None:
        self.answer(PAGE if self.path == "/lab/" else json.dumps(DATA).encode())

    def do_POST(self) -> None:
        self.answer(self.save[1], self.save[0])


@pytest.fixture(scope="module")
def lab_page() -> Iterator[tuple[Any, ThreadingHTTPServer]]:
    """The lab page open in chromium, and the server it came from."""
    from playwright.sync_api import sync_playwright

    server = ThreadingHTTPServer(("127.0.0.1", 0), Lab)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page()
        page.goto(f"http://127.0.0.1:{server.server_address[1]}/lab/")
        yield page, server
        browser.close()
    server.server_close()


def said_after_save(page: Any) -> tuple[str, str, str]:
    """Press Save run: what #saved then says, its class, and #saved-host."""
    page.get_by_role("button", name="Save run").click()
    page.wait_for_function(
        "(t => t && t !== 'saving...')(document.getElementById('saved').textContent)",
        timeout=10_000,
    )
    saved = page.locator("#saved")
    host = page.locator("#saved-host").inner_text()
    return saved.inner_text(), saved.get_attribute("class") or "", host


def _json(**body: object) -> bytes:
    return json.dumps(body).encode()


SAVED = _json(ok=True, path="/app/results/ui-1", host_path="/home/me/results/ui-1")
REFUSED = _json(ok=False, message="nothing measured yet: start a swarm first")
FAILED = _json(ok=False, message="not saved: KeyError: 'p50'")
ANSWERS = {  # what /lab/save answers -> what #saved says, its class
    "saved": ((200, SAVED), ("saved: /app/results/ui-1", "")),
    "refused": ((200, REFUSED), ("nothing measured yet: start a swarm first", "bad")),
    "error-said": ((500, FAILED), ("not saved: KeyError: 'p50'", "bad")),
    "error-html": (
        (500, FLASK_500),
        (
            "not saved: /lab/save answered HTTP 500 Internal Server Error: 500 Internal Server "
            "Error Internal Server Error The server encountered an internal error.",
            "bad",
        ),
    ),
    "error-empty": ((502, b""), ("not saved: /lab/save answered HTTP 502 Bad Gateway", "bad")),
    "not-json": ((200, b"ok"), ("not saved: /lab/save answered HTTP 200 OK: ok", "bad")),
    "ok-on-error": ((503, SAVED), ("not saved: /lab/save answered HTTP 503", "bad")),
}


@needs_chromium
@pytest.mark.parametrize("answer, expected", ANSWERS.values(), ids=ANSWERS.keys())
def test_save_says_what_the_server_answered(
    lab_page: tuple[Any, ThreadingHTTPServer],
    answer: tuple[int, bytes],
    expected: tuple[str, str],
) -> None:
    page, _ = lab_page
    Lab.save = answer
    said, cls, host = said_after_save(page)
    assert said.startswith(expected[0]) and cls == expected[1], (said, cls)
    assert "\n" not in said
    assert host == ("(on the host: /home/me/results/ui-1)" if answer == (200, SAVED) else "")


@needs_chromium
def test_save_says_when_the_server_is_gone(lab_page: tuple[Any, ThreadingHTTPServer]) -> None:
    """Last in this module: it stops the server."""
    page, server = lab_page
    server.shutdown()
    server.server_close()
    said, cls, host = said_after_save(page)
    assert said.startswith("not saved: no answer from /lab/save (") and cls == "bad", said
    assert host == ""
