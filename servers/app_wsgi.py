"""The Flask app served by every WSGI model (uWSGI threads/gevent, gunicorn sync/gthread/gevent).

`sleep` is imported at module level on purpose, as in the uWSGI blog: under gevent it cooperates
only if monkey-patching happened before this module was imported. That is how the lab shows the
late-patching pitfall instead of hiding it.

`/db` and `/cache` wait in real PostgreSQL and Redis (servers/dbclient.py); the PostgreSQL driver
is LAB_DB_DRIVER's, and psycogreen patches psycopg2 here, at import, after the server's gevent
monkey-patch.

The outbound pool is urllib3's, sized from LAB_POOL_SIZE: `requests` keeps 10 connections per host
and discards extras, so a default client under 100 concurrent requests measures TCP handshakes.
"""

from __future__ import annotations

from time import sleep

import urllib3
from flask import Flask, Response, request

from servers import common, dbclient

settings = common.AppSettings.from_env()
dbclient.green_psycopg2(settings.db_driver)
databases = dbclient.Clients(settings)
app = Flask(__name__)
_pool: urllib3.HTTPConnectionPool | None = None


def upstream() -> urllib3.HTTPConnectionPool:
    """One pool per process, created on first use so it is never shared across a fork."""
    global _pool
    if _pool is None:
        _pool = urllib3.connection_from_url(
            settings.upstream_url,
            maxsize=settings.pool_size,
            block=False,
            timeout=urllib3.Timeout(total=settings.timeout_s),
            retries=False,
        )
    return _pool


def respond(payload: bytes, status: int = 200) -> Response:
    return Response(payload, status=status, content_type=common.CONTENT_TYPE)


@app.get("/health")
def health() -> Response:
    return respond(common.HEALTH_BODY)


@app.get("/io")
def io() -> Response:
    reply = upstream().request("GET", common.upstream_path(request.args.get("delay_ms")))
    return respond(*common.io_body(reply.status))


@app.get("/sleep")
def sleep_view() -> Response:
    ms = int(request.args.get("ms", "100"))
    sleep(ms / 1000)
    return respond(common.body("sleep", ms=ms))


@app.get("/cpu")
def cpu() -> Response:
    n = int(request.args.get("n", common.DEFAULT_CPU_N))
    return respond(common.body("cpu", n=n, result=common.cpu_work(n)))


@app.get("/db")
def db() -> Response:
    """pg_sleep(delay_ms) in PostgreSQL; with upstream_ms, first that long on the upstream."""
    if not settings.db_url:
        return respond(*common.unconfigured("db", "LAB_DB_URL"))
    query = common.DbQuery.of(request.args)
    status = None
    if query.upstream_ms is not None:
        status = upstream().request("GET", query.upstream_path).status
    databases.pg_sleep(query.ms / 1000)
    return respond(query.body(status))


@app.get("/cache")
def cache() -> Response:
    """A Redis blocking pop that times out after delay_ms: the wait happens in the server."""
    if not settings.redis_url:
        return respond(*common.unconfigured("cache", "LAB_REDIS_URL"))
    ms = common.wait_ms(request.args.get("delay_ms"))
    databases.redis_wait(ms / 1000)
    return respond(common.body("cache", ms=ms, redis="ok"))
