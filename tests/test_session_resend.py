"""A kept connection the server closed after its answer: the lab's engine sends the next request
again on a new one, whatever its method, as browsers do, so a login's POST or a mix's write is
not lost to the race uWSGI's --http-socket runs on every request.

uWSGI answers HTTP/1.1 without `Connection: close` and closes the socket after the answer; when
its worker is preempted between the write and the close (a loaded 2-core machine), the client
has already sent its next request on that connection and reads a reset. geventhttpclient sends
an idempotent request again itself, never a POST (RFC 9110 9.2.2), so a login's POST after the
login page's GET failed as "reset" (Wagtail under uwsgi-threads lost half its logins). The
server here closes every connection 50 ms after its answer, without reading more: the race,
every time. It counts what it was sent, so a request sent again is seen to reach the app once.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from geventhttpclient.response import HTTPConnectionClosed
from geventhttpclient.url import URL

from lab.record.login import parse_login
from lab.run.generator import run_step
from loadgen.client.resend import ResendingClient
from loadgen.protocol import Start

LATE_CLOSE_S = 0.05


class LateCloser:
    """One request per connection, answered 200, then the close, late; a login's POST gets a
    session cookie, any other request a CSRF one."""

    def __init__(self, answers: bool = True) -> None:
        self.answers = answers  # False: each connection closed once its request is read
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.seen: list[str] = []  # each request line the app answered
        self.lock = threading.Lock()
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self.answer, args=(conn,), daemon=True).start()

    def answer(self, conn: socket.socket) -> None:
        with conn:
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                head += chunk
            lines = head.split(b"\r\n")
            length = next(
                (int(x.split(b":")[1]) for x in lines if x.lower().startswith(b"content-length:")),
                0,
            )
            body = head.split(b"\r\n\r\n", 1)[1]
            while len(body) < length:
                body += conn.recv(65536)
            with self.lock:
                self.seen.append(lines[0].decode())
                number = len(self.seen)
            if not self.answers:
                return
            cookie = b"sid" if lines[0].startswith(b"POST /login ") else b"csrf"
            conn.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n"
                b"Set-Cookie: %s=%d; Path=/\r\n\r\nok" % (cookie, number)
            )
            time.sleep(LATE_CLOSE_S)  # the worker preempted between its write and its close

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def late() -> Iterator[LateCloser]:
    server = LateCloser()
    yield server
    server.close()


def test_a_post_on_a_kept_connection_closed_late_is_sent_again_once(late: LateCloser) -> None:
    client = ResendingClient.from_url(URL(f"http://127.0.0.1:{late.port}"))
    for _ in range(2):  # the second goes out on the first's connection, before its close
        assert client.request("POST", "/notes", body=b"n=1").status_code == 200
    assert late.seen == ["POST /notes HTTP/1.1"] * 2


def test_a_post_that_fails_on_a_new_connection_is_not_sent_again() -> None:
    """A server that closes without answering: the failure is the server's and is counted;
    sending it again would hide it and send the app a write twice."""
    server = LateCloser(answers=False)
    try:
        client = ResendingClient.from_url(URL(f"http://127.0.0.1:{server.port}"))
        with pytest.raises((HTTPConnectionClosed, ConnectionResetError)):
            client.request("POST", "/notes", body=b"n=1")
        assert server.seen == ["POST /notes HTTP/1.1"]
    finally:
        server.close()


@pytest.mark.parametrize("generators", [1, 2], ids=["one-generator", "two-generators"])
def test_a_login_and_writes_on_a_closed_kept_connection_are_sent_again(
    late: LateCloser, generators: int, tmp_path: Path
) -> None:
    """Every login (its page's GET, then its POST on the kept connection) succeeds, every write
    of the mix is answered, and each reached the app once: nothing counted as an error."""
    users = 4
    mix = [
        {"label": "GET /page", "method": "GET", "path": "/page", "weight": 1},
        {"label": "POST /notes", "method": "POST", "path": "/notes", "weight": 1},
    ]
    # a CSRF token from a cookie: the login first GETs its page, then POSTs on that connection
    login = parse_login(
        "POST /login", "username=alice&password=secret", csrf="cookie:csrf=header:X-T"
    )
    start = Start(
        f"http://127.0.0.1:{late.port}",
        "/page",
        0.3,
        1.0,
        10.0,
        users=users,
        generators=generators,
        login=login,
        mix=mix,
        body="n=1",
    )
    done = run_step(start, tmp_path / "loadgen.log")
    assert done.login["requests"] == users and done.login["ok"] == users, done.login
    assert done.errors == {} and done.routes["POST /notes"]["ok"] > 0, (done.errors, done.routes)
    logins = [line for line in late.seen if line.startswith("POST /login ")]
    assert len(logins) == users  # sent again on a new connection, never twice to the app
