"""The concurrency probe passes real concurrent models and flags serialising ones."""

from __future__ import annotations

import pytest

from lab.run import preflight

CORE = ["uwsgi-threads", "uwsgi-gevent", "gunicorn-gevent", "gunicorn-asyncio", "gunicorn-gthread"]
SERIALISING = {
    "uwsgi-gevent-late-patch": "/sleep",  # module-level `from time import sleep` stays blocking
    "uvicorn-wsgi-bridge": "/io",  # WsgiToAsgi: one thread per worker, so every route
}


@pytest.mark.parametrize("model", CORE, ids=CORE)
def test_probe_passes_concurrent_models(model, start_model, upstream):
    server = start_model(model)
    result = preflight.run(model, server.url, upstream.url, "/io", k=8, delay_ms=300)
    assert result.ok, result.verify
    assert not result.serialized, result.message
    assert all(p.overlap > 4 for p in result.probes)


@pytest.mark.parametrize("model", list(SERIALISING), ids=list(SERIALISING))
def test_probe_flags_serialising_models(model, start_model, upstream):
    server = start_model(model)
    result = preflight.run(model, server.url, upstream.url, "/io", k=4, delay_ms=300)
    assert result.ok  # right answers, just one at a time
    assert result.serialized
    failed = [p for p in result.probes if not p.passed]
    assert any(p.route.startswith(SERIALISING[model]) for p in failed)
    assert all(p.wall_s > p.limit_s for p in failed)
    assert "overlap" in result.message


def test_probe_skipped_for_capacity_one(start_model, upstream):
    server = start_model("gunicorn-sync")
    result = preflight.run("gunicorn-sync", server.url, upstream.url, "/io", k=1, delay_ms=100)
    assert result.ok and not result.serialized and not result.probes


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/io", b'{"route":"io","upstream":"ok"}\n'),
        ("/sleep?ms=7", b'{"ms":7,"route":"sleep"}\n'),
        ("/health", b'{"route":"health","status":"ok"}\n'),
    ],
    ids=["io", "sleep", "health"],
)
def test_expected_bodies(path, expected):
    assert preflight.expected_body(path) == expected
