"""The check's login (`lab.run.appcheck`): each model's server is logged into once, as a user of
the sweep will be, before any route is requested; a login that gives no session refuses the app.

Why here, before any load: a login that answers 401, or a login form re-rendered with 200 and no
session cookie (Django's answer to a wrong password), would make every request of the sweep an
anonymous one, measuring the login redirect instead of the app. The refusal quotes the answer's
status and first line. The routes are then checked with the session it gave (its cookies, and
the CSRF header on writes), as the generator's users send them.
"""

from __future__ import annotations

import http.client
import http.cookies
import urllib.parse
from dataclasses import dataclass, field, replace

from lab.config.userapp import Route
from lab.record import placeholders
from lab.record.login import Login

TIMEOUT_S = 30.0
Headers = dict[str, str]
Routes = tuple[Route, ...]


@dataclass(frozen=True)
class Session:
    """What a login gave: its cookies and the CSRF token (None: none), or why it gave nothing."""

    cookies: dict[str, str] = field(default_factory=dict)
    token: str | None = None
    problem: str = ""

    def headers(self, login: Login, route: Route) -> tuple[tuple[str, str], ...]:
        """The route's headers with this session's cookies, and the CSRF header on a write."""
        jar = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
        extra = {"Cookie": jar} if jar else {}
        if route.method != "GET":
            extra |= login.later_headers(self.token)
        replaced = {k.lower() for k in extra}
        kept = tuple((k, v) for k, v in route.headers if k.lower() not in replaced)
        return kept + tuple(extra.items())


def send(
    base_url: str,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
    timeout_s: float = TIMEOUT_S,
) -> tuple[int, http.client.HTTPMessage, bytes]:
    """One request on a fresh connection (every request of the check): status, headers, body."""
    url = urllib.parse.urlsplit(base_url)
    conn = http.client.HTTPConnection(url.hostname or "127.0.0.1", url.port, timeout=timeout_s)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        reply = conn.getresponse()
        return reply.status, reply.msg, reply.read()
    finally:
        conn.close()


class Client:
    """One user's requests to one server, keeping the cookies it sets (a jar of one site:
    name -> value), redirects never followed (a login's own answer is what counts)."""

    def __init__(self, base_url: str, timeout_s: float = TIMEOUT_S) -> None:
        self.base_url, self.timeout_s = base_url, timeout_s
        self.cookies: dict[str, str] = {}

    def send(
        self, method: str, path: str, body: bytes | None = None, headers: Headers | None = None
    ) -> tuple[int, list[str], str]:
        """One request: its status, the cookies it set (names) and its body as text."""
        sent = dict(headers or {})
        if self.cookies:
            sent["Cookie"] = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
        status, got, raw = send(self.base_url, method, path, body, sent, self.timeout_s)
        set_names = []
        for header in got.get_all("Set-Cookie") or ():
            for name, morsel in http.cookies.SimpleCookie(header).items():
                set_names.append(name)
                self.cookies[name] = morsel.value
        return status, set_names, raw.decode(errors="replace")


def log_in(base_url: str, login: Login, timeout_s: float = TIMEOUT_S) -> Session:
    """The login as one user sends it: the login page first where a CSRF token is read, then
    the login itself; its session, or the problem with the answer's status and first line."""
    client = Client(base_url, timeout_s)
    page = ""
    try:
        if login.first_get:
            status, _, page = client.send("GET", login.first_get)
            if status >= 400:
                return Session(problem=f"the login page GET {login.first_get} answered {status}")
        token = login.token(client.cookies, page)
        if login.csrf is not None and token is None:
            where = "cookie" if login.csrf.source == "cookie" else "input of its form"
            said = f"no {login.csrf.name} {where}"
            return Session(problem=f"the login page GET {login.first_get} had {said} (--csrf)")
        body, headers = login.request(token)
        sent = body.encode() if body is not None else None
        status, set_names, text = client.send(login.method, login.path, sent, headers)
    except OSError as e:
        return Session(problem=f"the login {login.label} failed: {e or type(e).__name__}")
    problem = login.session_problem(status, set_names, text)
    # the token after the login: Django rotates its CSRF cookie when a user logs in
    return Session(client.cookies, login.token(client.cookies, page), problem)


def logged_in(
    base_url: str, login: Login, routes: Routes, load: Routes, probe: Route | None
) -> tuple[str, Routes, Routes, Route | None]:
    """Log in once, then the routes checked, those loaded and the probe's as that logged-in user
    sends them; or the problem (the routes unchanged) where the login gave no session."""
    session = log_in(base_url, placeholders.login_as(login, placeholders.CHECK, 0))
    if session.problem:
        return session.problem, routes, load, probe

    def sent(r: Route) -> Route:
        return replace(r, headers=session.headers(login, r))

    return "", tuple(map(sent, routes)), tuple(map(sent, load)), probe and sent(probe)
