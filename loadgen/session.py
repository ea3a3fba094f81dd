"""The lab's own generators' HTTP client: locust's FastHttpSession, without a cookie jar unless the
step logs its users in; and that login, once per simulated user.

Why no cookie jar: locust keeps one per session and, per request, builds a cookie header and
parses the response for cookies, under a lock: about 8% of the generator's CPU per request against
a fast target (benchmarks/loadgen_overhead.py). The lab's servers set no cookies, and the lab
measures a server as wrk, oha and ab do, which send none. The web UI's users (locustfile) keep
locust's jar: a person's session may need it.

Why a jar with a login (`Start.login`, `lab.record.login`): each user then logs in once before its
first request and keeps its own session for all its later ones, as locust's `HttpUser` does, so N
users are N sessions on the server, not one shared cookie. The login's requests go to an event
hook nobody listens to (they are not the mix's), and the login is counted and timed apart
(`Recorder.logins`), from its first request (the login page's GET, where a CSRF token is read) to
the login's answer.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import gevent
from locust.contrib.fasthttp import FastHttpSession, FastHttpUser
from locust.event import EventHook

from lab.record import placeholders
from lab.record.login import Login
from lab.record.placeholders import Source
from loadgen.client.errors import classify
from loadgen.client.resend import ResendingPool
from loadgen.protocol import Start
from loadgen.request import Request, RouteTally

NO_SESSION = "no_session"  # a login answered 2xx/3xx but set no session cookie


def without_cookies(session: FastHttpSession) -> FastHttpSession:
    """The session with geventhttpclient's cookie handling off (it skips a None jar)."""
    session.client.cookiejar = None
    return session


def lab_session(
    start: Start, events: EventHook, concurrency: int, cookies: bool = False, **more: Any
) -> FastHttpSession:
    """A session to the step's server: `concurrency` pooled connections, the step's timeouts,
    every request fired on `events` (the recorder listens there), no cookies unless `cookies`.

    Retries and redirects as locust's FastHttpUser sets them: geventhttpclient's own default
    retries a failed request three times, which would hide a timeout, a reset or a refusal in
    a slow success (a hung server's step would record no error at all). One exception, as
    browsers make it: a write sent on a kept connection the server had already closed goes out
    again on a new one (`loadgen.client.resend`), since the server never read it."""
    session = FastHttpSession(
        start.base_url,
        events,
        user=None,
        concurrency=concurrency,
        network_timeout=start.timeout_s,
        connection_timeout=start.timeout_s,
        max_retries=FastHttpUser.max_retries,
        max_redirects=FastHttpUser.max_redirects,
        **more,
    )
    session.client.clientpool = ResendingPool(**session.client.clientpool.client_args)
    return session if cookies else without_cookies(session)


@dataclass
class User:
    """One simulated user's session: its connection, its cookies (with a login) and the CSRF
    header its writes carry."""

    session: FastHttpSession
    extra: dict[str, str] = field(default_factory=dict)  # a write's CSRF header ({}: none)

    def headers(self, req: Request) -> dict[str, str] | None:
        """The request's headers as this user sends them."""
        if not self.extra or req.method == "GET":
            return req.header_dict
        return {**(req.header_dict or {}), **self.extra}


def new_user(
    start: Start, events: EventHook, tally: RouteTally, number: int, source: Source
) -> User:
    """A user of the step on its own connection: anonymous and cookie-less, or logged in
    (`start.login`, its placeholders filled as user `number` from `source`, the step's) with its
    own session, its login counted and timed into `tally`."""
    if start.login is None:
        return User(lab_session(start, events, 1))
    session = lab_session(start, EventHook(), 1, cookies=True)  # the login: nobody listens
    login = placeholders.login_as(start.login, source, number)
    user = User(session, log_in(session, login, tally))
    session.request_event = events  # its later requests are the mix's
    return user


def new_users(
    start: Start, events: EventHook, tally: RouteTally, count: int, source: Source
) -> list[User]:
    """`count` users of the step, each on its own connection, numbered from `start.user_base`
    (their {user}); with a login, all logged in at once before this returns (each of its
    requests bounded by the step's request timeout), so the step's phases start with every
    session made and no login inside its window."""
    numbers = range(start.user_base, start.user_base + count)
    if start.login is None:
        return [new_user(start, events, tally, n, source) for n in numbers]
    made = [gevent.spawn(new_user, start, events, tally, n, source) for n in numbers]
    gevent.joinall(made)
    return [g.value for g in made if g.value is not None]


def log_in(session: FastHttpSession, login: Login, tally: RouteTally) -> dict[str, str]:
    """The login on `session` (whose jar keeps its cookies); returns the CSRF header for the
    user's writes. A failed login is counted by its kind; the user goes on without a session
    (its requests then show the app's answer to an anonymous user)."""
    started = time.perf_counter()
    page, kind = "", None
    if login.first_get:
        answer = session.request("GET", login.first_get, allow_redirects=False)
        page, kind = getattr(answer, "text", "") or "", _kind(answer)
    before = _cookies(session)
    token = login.token(before, page)
    if kind is None:
        body, headers = login.request(token)
        answer = session.request(
            login.method, login.path, data=body, headers=headers, allow_redirects=False
        )
        after = _cookies(session)
        set_names = [k for k, v in after.items() if before.get(k) != v]
        kind = _kind(answer) or (None if login.gives_session(set_names) else NO_SESSION)
        token = login.token(after, page)  # Django rotates its CSRF cookie at a login
    tally.record(kind, (time.perf_counter() - started) * 1000)
    return login.later_headers(token) if kind is None else {}


def _kind(answer: Any) -> str | None:
    status = getattr(answer, "status_code", 0) or 0
    error = getattr(answer, "error", None)
    return classify(error if status == 0 else None, status, None, None)


def _cookies(session: FastHttpSession) -> dict[str, str]:
    return {c.name: c.value or "" for c in session.cookiejar}
