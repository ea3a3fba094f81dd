"""The check's requests to a user's app, and its writes sent twice before any load.

Each request of the check is sent on a fresh connection (`fetch`) with its placeholders filled
anew (`lab.record.placeholders`). A write (any method but GET and HEAD) that sends the same bytes
every time answers 409 or 500 from its second request on where the app keeps something unique
(an email, an order number, an idempotency key), and the sweep would then measure the error
path: so each write is sent twice under every model (its two answers are also the ones the check
compares), and a route whose second answer fails where its first did not is named, with the fix
(a placeholder), before any load.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from lab.config.userapp import Route
from lab.run import logincheck

READS = ("GET", "HEAD")  # every other method writes


@dataclass(frozen=True)
class Answer:
    status: int
    content_type: str
    digest: str  # sha256 of the body, first 16 hex digits
    size: int
    error: str = ""
    body: str = ""  # how the body departs from the route's template ("" = it fits)

    def summary(self) -> str:
        if self.error:
            return f"error: {self.error}"
        said = f"{self.status} {self.content_type or '-'} {self.size} B sha256:{self.digest}"
        return f"{said}; body: {self.body}" if self.body else said

    def kind(self) -> tuple[int, str]:
        """What must match exactly: the status and the content type (case and spaces aside)."""
        return self.status, "".join(self.content_type.lower().split())


def fetch(base_url: str, route: Route, timeout_s: float = 30.0) -> tuple[Answer, bytes]:
    """One request on a fresh connection: its answer, and the body to compare."""
    route = route.filled()  # placeholders: each request its own values
    request = route.request()
    try:
        sent = (route.method, route.path, request["data"], request["headers"], timeout_s)
        status, headers, body = logincheck.send(base_url, *sent)
    except OSError as e:
        return Answer(0, "", "", 0, error=str(e) or type(e).__name__), b""
    digest = hashlib.sha256(body).hexdigest()[:16]
    return Answer(status, headers.get("Content-Type", ""), digest, len(body)), body


def succeeded(route: Route, status: int) -> bool:
    """A status the route counts as its success: one it expects, else any below 400."""
    return status in route.expect if route.expect else 0 < status < 400


Sent = dict[str, tuple[tuple[Answer, bytes], tuple[Answer, bytes]]]  # label -> both answers


def sent_twice(base_url: str, routes: tuple[Route, ...]) -> Sent:
    """Each write sent twice, one after the other: both answers and bodies, by label (they are
    also the check's answers for the write: it is sent no more than twice)."""
    return {
        route.label: (fetch(base_url, route), fetch(base_url, route))
        for route in routes
        if route.method not in READS
    }


def failed_again(routes: tuple[Route, ...], sent: Sent) -> dict[str, str]:
    """The writes whose second request failed where the first succeeded: label -> what failed,
    with the fix ({}: none)."""
    found = {}
    for route in routes:
        if route.label not in sent:
            continue
        (first, _), (second, body) = sent[route.label]
        if succeeded(route, first.status) and not succeeded(route, second.status):
            found[route.label] = repeated(route, first.status, second, body)
    return found


def repeated(route: Route, first: int, second: Answer, body: bytes) -> str:
    """The sentence that names a write failing only when repeated, and what to do."""
    line = body.decode(errors="replace").strip().splitlines()[:1]
    said = f" ({line[0][:120]})" if line else ""
    got = second.error or f"{second.status}{said}"
    return (
        f"{route.label} answered {first} to its first request but {got} to the same request "
        "sent again: the sweep would measure the error path. Make each request's value unique "
        'with a placeholder, e.g. body = {email = "u{n}@example.com"} or {"id": "{uuid}"} '
        "(docs/your-traffic.md: placeholders)"
    )
