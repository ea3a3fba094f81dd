"""A login step: what each simulated user sends once, before its first request, to get a session
of its own (its cookies kept for all its later requests, as locust's `HttpUser` does).

Why a record of its own, at the bottom: the command line builds one (`--login 'POST /login'`,
`--login-body`, `--login-header`, `--csrf`), a mix file's route may be marked as the login, the
check tries it once per model (`lab.run.logincheck`) and every generator process runs it per user
(`loadgen.session`); all of them read this one frozen record and its pure helpers, so the
request sent and the CSRF token's place are decided in one place.

CSRF, as the two common frameworks expect it. Django: the `csrftoken` cookie, set by the login
page, sent back in the `X-CSRFToken` header (`--csrf cookie:csrftoken=header:X-CSRFToken`).
Flask-WTF: a hidden `csrf_token` input of the login form, sent back as a form field
(`--csrf form:csrf_token=field:csrf_token`), or in its `X-CSRFToken` header. With a CSRF setting
the login page (`page`, default the login's own path) is fetched with a GET first. A header
target is also sent with every later request of the user that is not a GET (its writes); a field
only with the login's form.
"""

from __future__ import annotations

import json
import re
import urllib.parse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from html.parser import HTMLParser
from typing import Any

from lab.record import hist
from lab.record.errors import LabError

SOURCES = ("cookie", "form")  # where the token is read
TARGETS = ("header", "field")  # where it is sent
METHODS = ("POST", "PUT", "PATCH", "GET")
CSRF_WORDS = (
    "expected SOURCE:NAME=TARGET:NAME[,TARGET:NAME], SOURCE cookie or form, TARGET header or "
    "field, e.g. cookie:csrftoken=header:X-CSRFToken or form:csrf_token=field:csrf_token"
)
HEADER = re.compile(r"^([!#$%&'*+.^_`|~0-9A-Za-z-]+):[ \t]*([^\r\n]*)$")
TAG = re.compile(r"<[^>]*>")
FIRST_LINE_CHARS = 120


@dataclass(frozen=True)
class Csrf:
    """Where the CSRF token is read (a cookie, or a hidden input of the login form) and where it
    is sent back (headers, form fields)."""

    source: str
    name: str
    send: tuple[tuple[str, str], ...]  # (target, name): ("header", "X-CSRFToken")

    def words(self) -> str:
        """The `--csrf` text that gives this setting back."""
        targets = ",".join(f"{t}:{n}" for t, n in self.send)
        return f"{self.source}:{self.name}={targets}"

    def headers(self, token: str) -> dict[str, str]:
        return {n: token for t, n in self.send if t == "header"}

    def fields(self, token: str) -> dict[str, str]:
        return {n: token for t, n in self.send if t == "field"}


@dataclass(frozen=True)
class Login:
    """One login request, sent once per simulated user before its first request."""

    method: str = "POST"
    path: str = "/login"
    body: str | None = None  # a form (`user=a&password=b`) or JSON; its content type follows
    headers: tuple[tuple[str, str], ...] = ()
    csrf: Csrf | None = None
    page: str = ""  # fetched with a GET first ("": the login's path where a CSRF token is read)
    cookie: str = ""  # the session cookie the login must set ("": any but the CSRF cookie)

    @property
    def label(self) -> str:
        return f"{self.method} {self.path}"

    @property
    def first_get(self) -> str:
        """The page to GET before the login ("": none): the form, and the CSRF cookie."""
        return self.page or (self.path if self.csrf is not None else "")

    def token(self, cookies: Mapping[str, str], page: str) -> str | None:
        """The CSRF token from the cookies or the login page (None: no setting, or not found)."""
        if self.csrf is None:
            return None
        if self.csrf.source == "cookie":
            return cookies.get(self.csrf.name)
        return form_token(page, self.csrf.name)

    def request(self, token: str | None) -> tuple[str | None, dict[str, str]]:
        """The login's body and headers, the token where the CSRF setting puts it."""
        headers = dict(self.headers)
        body = self.body
        if token is not None and self.csrf is not None:
            headers |= self.csrf.headers(token)
            if fields := self.csrf.fields(token):
                body = with_fields(body, fields)
        if body is not None and not any(k.lower() == "content-type" for k in headers):
            headers["Content-Type"] = content_type(body)
        return body, headers

    def later_headers(self, token: str | None) -> dict[str, str]:
        """What every later request of the user that is not a GET carries: the CSRF header."""
        if token is None or self.csrf is None:
            return {}
        return self.csrf.headers(token)

    def gives_session(self, set_cookies: Iterable[str]) -> bool:
        """Whether a login's answer that set these cookies (names) gave a session: the session
        cookie named (`cookie`), else any cookie but the CSRF one."""
        names = set(set_cookies)
        if self.cookie:
            return self.cookie in names
        csrf_cookie = self.csrf.name if self.csrf and self.csrf.source == "cookie" else ""
        return bool(names - {csrf_cookie})

    def session_problem(self, status: int, set_cookies: Iterable[str], text: str) -> str:
        """Why the login's answer gives no session ("" where it does): not 2xx/3xx, or no
        session cookie set; with its status and first line."""
        said = f"the login {self.label} answered {status}: {first_line(text) or '(no body)'}"
        if not 200 <= status < 400:
            return said
        if self.gives_session(set_cookies):
            return ""
        if self.cookie:
            return f"{said}; it set no {self.cookie} cookie (--login-cookie)"
        return f"{said}; it set no session cookie (wrong credentials? --login-body)"

    @classmethod
    def of(cls, data: Mapping[str, Any]) -> Login:
        """The record from its JSON form (a generator's start message)."""
        csrf = data.get("csrf")
        return cls(
            data["method"],
            data["path"],
            data.get("body"),
            tuple((str(k), str(v)) for k, v in data.get("headers") or ()),
            Csrf(csrf["source"], csrf["name"], tuple((t, n) for t, n in csrf["send"]))
            if csrf
            else None,
            data.get("page") or "",
            data.get("cookie") or "",
        )


def parse_login(
    text: str,
    body: str | None = None,
    headers: tuple[str, ...] = (),
    csrf: str | None = None,
    page: str | None = None,
    cookie: str | None = None,
) -> Login:
    """`--login 'POST /login'` with its body, headers, CSRF setting, page and session cookie;
    LabError naming the bad one."""
    method, _, path = text.strip().rpartition(" ")
    method = method.strip().upper() or "POST"
    if method not in METHODS or not _is_path(path):
        raise LabError(f"--login {text!r}: expected METHOD /PATH, e.g. 'POST /login'")
    if page is not None and not _is_path(page):
        raise LabError(f"--login-page {page!r}: expected /PATH, e.g. /accounts/login/")
    pairs = tuple(_header(h) for h in headers)
    spec = parse_csrf(csrf) if csrf else None
    return Login(method, path, body, pairs, spec, page or "", (cookie or "").strip())


def parse_csrf(text: str) -> Csrf:
    """`SOURCE:NAME=TARGET:NAME[,TARGET:NAME]`; LabError with the syntax where it is not."""
    source_text, eq, targets = text.strip().partition("=")
    source, _, name = source_text.partition(":")
    send = tuple(t.strip().partition(":")[::2] for t in targets.split(","))
    good = (
        eq
        and source in SOURCES
        and _token(name)
        and send
        and all(t in TARGETS and _token(n) for t, n in send)
    )
    if not good:
        raise LabError(f"--csrf {text!r}: {CSRF_WORDS}")
    return Csrf(source, name, send)


def _is_path(path: str) -> bool:
    return path.startswith("/") and not any(c in path for c in " \r\n")


def _token(name: str) -> bool:
    return bool(re.fullmatch(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+", name))


def _header(text: str) -> tuple[str, str]:
    match = HEADER.match(text)
    if match is None:
        raise LabError(f"--login-header {text!r}: expected 'Name: value' on one line")
    return match.group(1), match.group(2)


def content_type(body: str) -> str:
    """A JSON body's type where it parses as an object or a list, else a form's."""
    try:
        json_body = isinstance(json.loads(body), dict | list)
    except ValueError:
        json_body = False
    return "application/json" if json_body else "application/x-www-form-urlencoded"


def with_fields(body: str | None, fields: Mapping[str, str]) -> str:
    """The body with the fields added: as keys of a JSON object, else as form fields."""
    if body and content_type(body) == "application/json":
        data = json.loads(body)
        if isinstance(data, dict):
            return json.dumps({**data, **fields})
    extra = urllib.parse.urlencode(dict(fields))
    return f"{body}&{extra}" if body else extra


class _Inputs(HTMLParser):
    """The value of the first `<input name=NAME>` of a page."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name
        self.value: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "input" and found.get("name") == self.name and self.value is None:
            self.value = found.get("value") or ""


def form_token(page: str, name: str) -> str | None:
    """The value of the login form's hidden input `name` (None where the page has none)."""
    parser = _Inputs(name)
    parser.feed(page)
    parser.close()
    return parser.value


def first_line(text: str) -> str:
    """An answer's first line of text (tags left out), shortened: what a refusal quotes."""
    for line in TAG.sub(" ", text).splitlines():
        if words := " ".join(line.split()):
            return words[:FIRST_LINE_CHARS]
    return ""


def evidence(figures: dict[str, Any]) -> dict[str, Any]:
    """A login step's evidence: the users' logins, counted and timed apart from the mix, from
    the generator's figures ({}: no login)."""
    if not figures:
        return {}
    h = hist.decode(figures["histogram"])
    latency = hist.summary_ms(h) if h.get_total_count() else {}
    kept = {"logins": figures["requests"], "ok": figures["ok"], "errors": figures["errors"]}
    return {"login": {**kept, "latency_ms": latency}}


def failures(evidence: dict[str, Any]) -> str:
    """Why a login step is not the app asked for ("" where every login gave a session): users
    whose login failed went on without one (`login_failed`)."""
    got = evidence.get("login", {})
    failed = got.get("logins", 0) - got.get("ok", 0)
    if failed <= 0:
        return ""
    kinds = ", ".join(f"{kind} {n}" for kind, n in sorted(got.get("errors", {}).items()))
    said = f"{failed} of {got['logins']} logins failed ({kinds or 'unclassified'})"
    return f"{said}: those users sent their requests without a session"
