"""Every model serves the same app: identical status and bytes on every route."""

from __future__ import annotations

import http.client
from urllib.parse import urlsplit

import pytest

from lab.config.models import load_registry
from lab.run import preflight
from lab.system import http_client

ALL_MODELS = list(load_registry().models)
ROUTES = ["/health", "/io", "/io?delay_ms=20", "/sleep?ms=20", "/cpu?n=1000"]


@pytest.mark.parametrize("model", ALL_MODELS, ids=ALL_MODELS)
def test_every_model_answers_identically(model, start_model, upstream):
    server = start_model(model)
    ok, checks = preflight.verify(server.url, upstream.url, ROUTES)
    assert ok, checks
    assert all(checks[r]["upstream_calls"] == 1 for r in ROUTES if r.startswith("/io"))


@pytest.mark.parametrize("model", ["uwsgi-gevent", "gunicorn-asyncio"], ids=str)
def test_upstream_errors_become_502(model, start_model, failing_upstream):
    """A failing upstream is the upstream's fault: every model says so with the same 502."""
    server = start_model(model, failing_upstream.url)
    status, body, _ = http_client.get(server.url, "/io")
    assert (status, body) == (502, b'{"route":"io","upstream":"error 500"}\n')


def test_uwsgis_keep_alive_socket_fails_its_gevent_engine(start_model):
    """Why the uWSGI models close each connection (servers/models.toml): on uWSGI's keep-alive
    socket the gevent engine answers a connection's first request and fails the next. If this
    test fails, uWSGI or gevent fixed it: the uWSGI models could keep connections alive."""
    server = start_model("uwsgi-gevent-keepalive")
    port = urlsplit(server.url).port
    answered = []
    for _ in range(2):  # a fresh connection each time, two requests on it
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        for _ in range(2):
            try:
                conn.request("GET", "/health")
                answered.append(conn.getresponse().read() != b"")
            except (OSError, http.client.HTTPException):
                answered.append(False)
                break
        conn.close()
    assert answered[0] and not all(answered), answered
    assert "has no attribute 'stop'" in "\n".join(server.proc.log_tail(200))
