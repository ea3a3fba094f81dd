"""Every model serves the same app: identical status and bytes on every route."""

from __future__ import annotations

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
