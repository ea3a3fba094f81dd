"""The lab's own generators' HTTP client: locust's FastHttpSession, without a cookie jar.

Why no cookie jar: locust keeps one per session and, per request, builds a cookie header and
parses the response for cookies, under a lock: about 8% of the generator's CPU per request against
a fast target (benchmarks/loadgen_overhead.py). The lab's servers set no cookies, and the lab
measures a server as wrk, oha and ab do, which send none. The web UI's users (locustfile) keep
locust's jar: a person's session may need it.
"""

from __future__ import annotations

from typing import Any

from locust.contrib.fasthttp import FastHttpSession, FastHttpUser
from locust.event import EventHook

from loadgen.protocol import Start


def without_cookies(session: FastHttpSession) -> FastHttpSession:
    """The session with geventhttpclient's cookie handling off (it skips a None jar)."""
    session.client.cookiejar = None
    return session


def lab_session(start: Start, events: EventHook, concurrency: int, **more: Any) -> FastHttpSession:
    """A session to the step's server: `concurrency` pooled connections, the step's timeouts,
    every request fired on `events` (the recorder listens there), no cookies.

    Retries and redirects as locust's FastHttpUser sets them: geventhttpclient's own default
    retries a failed request three times, which would hide a timeout, a reset or a refusal in
    a slow success (a hung server's step would record no error at all)."""
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
    return without_cookies(session)
