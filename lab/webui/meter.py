"""`python -m lab.webui.meter --pid PID --port PORT`: a server's CPU and RSS, from its container.

Why: the lab page under Compose shows each model's server CPU and RSS, but the locust container
has no Docker socket, and must not get one (the socket is root on the host). So each model
container runs this meter beside its server (`lab serve --meter-port`). It sits outside the
server's process tree and measures that tree with the same `TreeMeter` that `lab ui` uses for
native servers, so the meter's own CPU and memory are never counted.

GET / answers {"cpu_s": CPU seconds of the tree so far, "rss_mb": its RSS now, "pss_mb": its PSS
now}, and, for a model behind nginx (`lab serve --front nginx`, `--front-pid`), the same three for
nginx's tree under "front", so the page shows the front's cost apart from the server's;
GET /profile?seconds=S answers where the tree's time goes over S seconds (lab.webui.frames:
py-spy, which needs the container's SYS_PTRACE). A reader
takes the CPU rate from two answers (`lab.system.procstats.RemoteMeter`), so several readers never
disturb each other. The meter exits when the server is gone.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import psutil

from lab.record.errors import LabError
from lab.system import safety
from lab.system.sampling import TreeMeter
from lab.webui import frames

POLL_S = 1.0


def reading(meter: TreeMeter) -> dict[str, float]:
    """One tree's answer: CPU seconds so far, RSS and PSS now."""
    now = meter.sample()
    return {"cpu_s": round(meter.cpu_s, 4), "rss_mb": now.rss_mb, "pss_mb": now.pss_mb}


def profiled(pid: int, query: str) -> tuple[int, dict[str, Any]]:
    """`GET /profile?seconds=S`: where the server's time goes over S seconds (lab.webui.frames),
    or 400 with why where S is no number of seconds it takes."""
    asked = urllib.parse.parse_qs(query).get("seconds", [""])[0]
    try:
        seconds = frames.seconds_asked(asked)
    except LabError as e:
        return 400, {"problem": str(e)}
    return 200, frames.sample(pid, seconds)


def handler(
    meter: TreeMeter, front: TreeMeter | None, lock: threading.Lock
) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            url = urllib.parse.urlsplit(self.path)
            if url.path == "/profile":
                self._answer(*profiled(meter.root.pid, url.query))
                return
            with lock:
                answer: dict[str, object] = dict(reading(meter))
                if front is not None:
                    answer["front"] = reading(front)
            self._answer(200, answer)

        def _answer(self, status: int, answer: dict[str, Any]) -> None:
            body = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            """Quiet: one line per second per reader would bury the server's own log."""

    return Handler


def serve(pid: int, host: str, port: int, front_pid: int = 0) -> None:
    """Answer until process `pid` is gone."""
    meter, front = TreeMeter(pid), TreeMeter(front_pid) if front_pid else None
    server = ThreadingHTTPServer((host, port), handler(meter, front, threading.Lock()))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    while _alive(pid):
        time.sleep(POLL_S)
    server.shutdown()


def _alive(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.webui.meter", description=__doc__)
    parser.add_argument("--pid", type=int, required=True, help="the server's main process")
    parser.add_argument("--front-pid", type=int, default=0, help="nginx's master, if fronted")
    parser.add_argument("--host", default="127.0.0.1", help="non-loopback needs --allow-remote")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--allow-remote", action="store_true", help="allow a non-loopback --host")
    args = parser.parse_args(argv)
    try:
        safety.check_host(args.host, "--host", allow_remote=args.allow_remote)
        serve(args.pid, args.host, args.port, args.front_pid)
    except (OSError, psutil.Error, LabError) as e:
        print(f"lab meter: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
