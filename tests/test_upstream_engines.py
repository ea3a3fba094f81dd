"""Both upstream engines, one process or several on one port, keep the same API and counters."""

from __future__ import annotations

import http.client
import json
from concurrent.futures import ThreadPoolExecutor

import pytest

from lab.backends.base import upstream_argv
from lab.system import http_client, procs

pytestmark = pytest.mark.procs  # every test starts processes


CASES = [("fast", 1), ("fast", 2), ("aiohttp", 1), ("aiohttp", 2)]


# what lab.config.upstreamroute writes for --upstream-route 'POST /v1/charges=250ms 402 {...}'
# and '/v1/users/*=20ms'
RULES = [
    {"method": "POST", "path": "/v1/charges", "ms": 250, "status": 402, "body": '{"declined":1}'},
    {"path": "/v1/users/", "prefix": True, "ms": 20},
]


@pytest.fixture(params=CASES, ids=[f"{e}-x{n}" for e, n in CASES])
def upstream_url(request, tmp_path):
    engine, processes = request.param
    port = procs.free_port()
    argv = upstream_argv(
        port,
        "--delay-ms",
        "50",
        "--engine",
        engine,
        "--processes",
        str(processes),
        "--routes",
        json.dumps(RULES),
    )
    proc = procs.start("upstream", argv, log_path=tmp_path / "upstream.log")
    url = f"http://127.0.0.1:{port}"
    try:
        procs.wait_http(proc, url + "/health", 15)
        yield url
    finally:
        proc.stop()


def stats(url: str) -> dict[str, float]:
    return json.loads(http_client.get(url, "/stats")[1])


COUNTERS = ("served", "inflight", "max_inflight")


def test_counters_sum_over_processes(upstream_url):
    http_client.get(upstream_url, "/stats/reset", method="POST")
    with ThreadPoolExecutor(12) as pool:
        answers = list(
            pool.map(lambda _: http_client.get(upstream_url, "/delay?ms=400"), range(12))
        )
    assert {(s, b) for s, b, _ in answers} == {(200, b'{"ok":true}')}
    now = stats(upstream_url)
    assert {k: now[k] for k in COUNTERS} == {"served": 12, "inflight": 0, "max_inflight": 12}
    assert 0 <= now["loop_lag_mean_ms"] <= now["loop_lag_max_ms"]  # every process's loop ticks
    http_client.get(upstream_url, "/stats/reset", method="POST")
    now = stats(upstream_url)
    assert {k: now[k] for k in COUNTERS} == {"served": 0, "inflight": 0, "max_inflight": 0}


def test_config_reaches_every_process(upstream_url):
    http_client.get(upstream_url, "/delay?ms=1")  # every engine answers before the change too
    conn = http.client.HTTPConnection("127.0.0.1", int(upstream_url.rsplit(":", 1)[1]))
    conn.request("POST", "/config", body=json.dumps({"delay_ms": 600, "error_rate": 1.0}))
    assert json.loads(conn.getresponse().read())["delay_ms"] == 600
    conn.close()
    with ThreadPoolExecutor(6) as pool:  # fresh connections land on every process
        answers = list(pool.map(lambda _: http_client.get(upstream_url, "/delay"), range(6)))
    # asyncio may fire a timer up to its clock resolution early: 0.5999 s was seen
    assert all(status == 500 and seconds >= 0.59 for status, _, seconds in answers), answers


def test_keep_alive_connection_serves_requests_in_order(upstream_url):
    conn = http.client.HTTPConnection("127.0.0.1", int(upstream_url.rsplit(":", 1)[1]))
    for ms in (30, 1, 10):
        conn.request("GET", f"/delay?ms={ms}")
        reply = conn.getresponse()
        assert (reply.status, reply.read()) == (200, b'{"ok":true}')
    conn.close()


def test_any_path_and_method_waits_and_rules_answer_their_routes(upstream_url):
    """An app's own API calls wait like production: the scenario's delay on any path, a rule's
    delay, status and body on its route; each route's calls are counted across processes."""
    http_client.get(upstream_url, "/stats/reset", method="POST")
    status, body, seconds = http_client.get(upstream_url, "/nowhere", method="PUT")
    assert (status, body) == (200, b'{"ok":true}') and seconds >= 0.045
    status, body, seconds = http_client.get(upstream_url, "/v1/charges", method="POST")
    assert (status, body) == (402, b'{"declined":1}') and seconds >= 0.245
    assert http_client.get(upstream_url, "/v1/charges")[0] == 200  # the rule is for POST only
    with ThreadPoolExecutor(4) as pool:
        users = list(pool.map(lambda n: http_client.get(upstream_url, f"/v1/users/{n}"), range(4)))
    assert all(status == 200 and seconds < 0.045 + 0.2 for status, _, seconds in users)
    assert http_client.get(upstream_url, "/config")[0] == 405  # the upstream's own paths stay
    routes = stats(upstream_url)["routes"]
    assert {k: v["calls"] for k, v in routes.items()} == {
        "PUT /nowhere": 1,
        "POST /v1/charges": 1,
        "GET /v1/charges": 1,
        "GET /v1/users/*": 4,
    }
    assert (
        routes["POST /v1/charges"]["mean_ms"] == 250 and routes["GET /v1/users/*"]["mean_ms"] == 20
    )
