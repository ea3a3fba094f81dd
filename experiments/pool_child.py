"""Child process of `pool-overhead`: one model, one pool size, all trials; JSON lines on stdout.

Usage: python -m experiments.pool_child {gevent|threads} --size N --tasks T --sleep-ms MS
       --trials K --hlog-dir DIR [--url http://127.0.0.1:P/delay?ms=5]

gevent must patch before anything imports socket or threading, so the patch happens here at the
very top, and only for the gevent model; the threads model runs in its own, unpatched, process.
The protocol is the original's: threads pull from one shared queue; greenlets are spawned into a
`gevent.pool.Pool`; the clock runs from spawning the first task to joining the pool.
"""

import sys

if __name__ == "__main__" and sys.argv[1:2] == ["gevent"]:
    from gevent import monkey

    monkey.patch_all()

import argparse  # noqa: E402
import http.client  # noqa: E402
import json  # noqa: E402
import queue  # noqa: E402
import resource  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402
from urllib.parse import urlsplit  # noqa: E402

from lab.record.hist import new_histogram, record_ms, summary_ms, write_hlog  # noqa: E402


def status_mb(field: str) -> float:
    """VmRSS (now) or VmHWM (peak since the last reset) from /proc/self/status, in MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


def reset_peak_rss() -> None:
    """Restart the peak-RSS high-water mark, so a trial's peak is its own, not the imports'."""
    Path("/proc/self/clear_refs").write_text("5")


def cpu_s() -> tuple[float, float]:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime, ru.ru_stime


class Upstream:
    """Keep-alive HTTP connections to the mock upstream, one per worker at most, checked out per
    task, so the real-I/O variant measures socket I/O and not TCP handshakes."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.target = parts.path + (f"?{parts.query}" if parts.query else "")
        self.idle: queue.LifoQueue[http.client.HTTPConnection] = queue.LifoQueue()
        self.errors = 0

    def get(self) -> None:
        try:
            conn = self.idle.get_nowait()
        except queue.Empty:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
        try:
            conn.request("GET", self.target)
            resp = conn.getresponse()
            resp.read()
            ok = resp.status == 200
        except OSError:
            conn.close()
            self.errors += 1
            return
        self.errors += not ok
        self.idle.put(conn)


def run_threads(size: int, tasks: int, task: Callable[[], None]) -> float:
    q: queue.Queue[int] = queue.Queue()
    for i in range(tasks):
        q.put(i)

    def worker() -> None:
        while True:
            try:
                q.get_nowait()
            except queue.Empty:
                return
            task()

    start = time.perf_counter()
    workers = [threading.Thread(target=worker) for _ in range(size)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return time.perf_counter() - start


def run_gevent(size: int, tasks: int, task: Callable[[], None]) -> float:
    from gevent.pool import Pool

    pool = Pool(size)
    start = time.perf_counter()
    for _ in range(tasks):
        pool.spawn(task)
    pool.join()
    return time.perf_counter() - start


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    ap.add_argument("model", choices=["gevent", "threads"])
    ap.add_argument("--size", type=int, required=True)
    ap.add_argument("--tasks", type=int, required=True)
    ap.add_argument("--sleep-ms", type=float, required=True)
    ap.add_argument("--trials", type=int, required=True)
    ap.add_argument("--hlog-dir", type=Path, required=True)
    ap.add_argument("--variant", default="sleep")
    ap.add_argument("--url", default="")
    return ap.parse_args()


def trial(a: argparse.Namespace, number: int, upstream: Upstream | None) -> dict[str, Any]:
    """Run all tasks once through the pool; its timings, CPU, memory and histogram."""
    durations: list[float] = []  # list.append is atomic under the GIL: no lock in the hot path
    sleep_s = a.sleep_ms / 1000

    def task() -> None:
        t0 = time.perf_counter()
        if upstream:
            upstream.get()
        else:
            time.sleep(sleep_s)
        durations.append(time.perf_counter() - t0)

    runner = run_gevent if a.model == "gevent" else run_threads
    ideal = a.sleep_ms / 1000 * a.tasks / a.size
    reset_peak_rss()
    base_rss = status_mb("VmRSS")
    u0, s0 = cpu_s()
    wall_start = time.time()
    total = runner(a.size, a.tasks, task)
    u1, s1 = cpu_s()
    peak = status_mb("VmHWM")
    hist = new_histogram()
    for d in durations:
        record_ms(hist, d * 1000)
    rel = f"histograms/{a.model}/{a.variant}-c{a.size}-t{number}.hlog"
    write_hlog(a.hlog_dir / rel, [(wall_start, wall_start + total, hist)])
    return {
        "model": a.model,
        "variant": a.variant,
        "size": a.size,
        "trial": number,
        "tasks": a.tasks,
        "completed": len(durations),
        "errors": upstream.errors if upstream else 0,
        "total_s": total,
        "ideal_s": ideal,
        "overhead": total / ideal,
        "cpu_user_s": u1 - u0,
        "cpu_sys_s": s1 - s0,
        "cpu_s": (u1 - u0) + (s1 - s0),
        "base_rss_mb": round(base_rss, 2),
        "peak_rss_mb": round(peak, 2),
        "task_ms": summary_ms(hist),
        "histogram": rel,
    }


def main() -> None:
    a = parse_args()
    upstream = Upstream(a.url) if a.url else None
    for number in range(1, a.trials + 1):
        print(json.dumps(trial(a, number, upstream)), flush=True)
        if upstream:
            upstream.errors = 0


if __name__ == "__main__":
    main()
