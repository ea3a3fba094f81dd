"""The concurrency probe passes real concurrent models and flags serialising ones; it is wide
enough (32, after 8) to see a pool of 15 as 15."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from http.server import ThreadingHTTPServer

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from lab.run import preflight
from tests.helpers import QuietHandler

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


POOL_WAIT_S = 0.1


class PooledHandler(QuietHandler):
    """Each request waits POOL_WAIT_S holding one of the server's semaphore's slots: a pool."""

    pool = threading.BoundedSemaphore(1)

    def do_GET(self) -> None:
        with self.pool:
            time.sleep(POOL_WAIT_S)
        self.answer(b"done")


class Server(ThreadingHTTPServer):
    request_queue_size = 64  # 32 connecting at once: none waits for a SYN retry
    daemon_threads = True


@contextlib.contextmanager
def pooled_server(size: int) -> Iterator[str]:
    """A threaded server on loopback whose route lets `size` requests wait at once."""
    handler = type("Pooled", (PooledHandler,), {"pool": threading.BoundedSemaphore(size)})
    server = Server(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(("size", "cap"), [(15, 15), (32, None)], ids=["pool-15", "pool-32"])
def test_the_probe_is_wide_enough_to_see_a_pool_of_15_or_32(size: int, cap: int | None) -> None:
    """Eight at once overlap fully against either pool, so the probe widens to 32: against 15
    its answers come back in waves of 15 (a cap of 15, where the overlap alone says 11), against
    32 all at once (no cap)."""
    with pooled_server(size) as url:
        probe = preflight.probe(url, "/work", 32, POOL_WAIT_S * 1000)
        # The server shares this process's GIL with the probe's 32 threads; beside another
        # test on 2 cores its waves can blur (CI, once: answers spread over 0.10-0.24 s, no gap
        # of half a delay): measured again, a bounded number of times, the last judged.
        for _ in range(2):
            if probe.cap == cap:
                break
            probe = preflight.probe(url, "/work", 32, POOL_WAIT_S * 1000)
    assert probe.k == 32 and probe.outcomes == {"served": 32}
    assert probe.cap == cap, probe.words


def test_a_serialising_route_fails_at_the_narrow_width_without_waiting_for_32() -> None:
    with pooled_server(1) as url:
        probe = preflight.probe(url, "/work", 32, POOL_WAIT_S * 1000)
    assert probe.k == preflight.NARROW and not probe.passed and probe.cap is None


@given(
    k=st.integers(3, 64),
    share=st.floats(0.05, 0.99),
    jitter=st.lists(st.floats(0, 0.24), min_size=64, max_size=64),
)
def test_answers_in_waves_give_the_first_waves_size(
    k: int, share: float, jitter: list[float]
) -> None:
    """k requests against a pool of p < k come back in waves of p, each a delay d later (each
    answer up to a quarter of d late): the cap is p, whatever the overlap rounds to."""
    d, pool = 0.1, max(2, min(k - 1, round(share * k)))
    served = [d * (i // pool + 1) + d * jitter[i] for i in range(k)]
    overlap = round(k * d / max(served), 2)
    assume(overlap >= 1.5)
    assert preflight.measured_cap(overlap, k, served, d) == pool
