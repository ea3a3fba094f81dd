"""The two servers of `mixpanel`, serving the same WSGI app: gevent's pywsgi or Paste's httpserver.

Usage: python -m experiments.mixpanel_server {gevent|paste} --port P --pool N [--backlog B]

As in the original, the server's pool matches the client's concurrency: a gevent Pool of N
greenlets, or Paste's thread pool of N workers. Without --backlog every other setting is the
server's default (Paste listens with a backlog of 5, gevent's StreamServer with 128), because the
defaults are what the 2010 comparison measured; --backlog is the variant that tests whether Paste's
tiny listen queue, not threads, made the difference.
"""

import sys

if __name__ == "__main__" and sys.argv[1:2] == ["gevent"]:
    from gevent import monkey

    monkey.patch_all()

import argparse  # noqa: E402
import resource  # noqa: E402
from collections.abc import Callable, Iterable  # noqa: E402
from typing import Any  # noqa: E402

BODY = b"Hello, World!"


def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    """The smallest WSGI app: what is compared is the server, not the application."""
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(BODY)))])
    return [BODY]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("server", choices=["gevent", "paste"])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--pool", type=int, required=True)
    ap.add_argument("--backlog", type=int, default=None, help="listen backlog; default: server's")
    a = ap.parse_args()
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if a.server == "gevent":
        from gevent.pool import Pool
        from gevent.pywsgi import WSGIServer

        WSGIServer(
            (a.host, a.port), app, spawn=Pool(a.pool), log=None, backlog=a.backlog
        ).serve_forever()
    else:
        from paste import httpserver

        backlog = {"request_queue_size": a.backlog} if a.backlog else {}
        httpserver.serve(
            app,
            host=a.host,
            port=str(a.port),
            use_threadpool=True,
            threadpool_workers=a.pool,
            **backlog,
        )


if __name__ == "__main__":
    main()
