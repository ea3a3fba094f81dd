"""Before any load: is the server right, and does it really serve requests concurrently?

Verification checks every route's status and exact body, and that `/io` really reached the
upstream. The concurrency probe sends K slow requests at once: a model that overlaps them finishes
in about one delay, one that serialises them (late monkey-patching, a blocking call in an event
loop, a one-thread bridge) takes about K delays. Such a model is flagged `serialized` with the
measured times, and its numbers are never presented as a fair result.
"""

from __future__ import annotations

import contextlib
import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

import psutil

from lab.system.http_client import get
from servers.common import DEFAULT_CPU_N, expected_body

# A probe passes if its wall time stays within this fraction of the extra time full
# serialisation would add: d + (K - 1) * d * SLACK. Halfway would also accept half-serialised.
SLACK = 0.25
# An overlap under this share of K (and well above 1) is a measured cap: e.g. 3.97 of 8 means
# about 4 requests run at once, a pool or a lock short of what the knobs allow.
PARTIAL = 0.75
TIMED_OUT, FAILED = -1, 0  # a probe request's "status" where no answer came
# The first stage's width: a model that serialises fails it in NARROW delays; only one that
# overlapped all of it is probed at the full K (scenario `probe_k`), which then sees a pool of 15.
NARROW = 8


@dataclass
class Probe:
    route: str
    k: int
    delay_ms: float
    wall_s: float
    latencies_s: list[float]
    overlap: float  # K * d / wall: K when fully concurrent, 1 when serialised
    limit_s: float
    passed: bool
    cap: float | None = None  # about this many at once, where the overlap fell short of K
    outcomes: dict[str, int] = field(default_factory=dict)  # served, refused, timed_out, failed

    @property
    def words(self) -> str:
        capped = f" (a cap of about {self.cap:g} at once)" if self.cap is not None else ""
        return f"{self.route} overlap {self.overlap}/{self.k}{capped}{self.unserved}"

    @property
    def unserved(self) -> str:
        """What the requests not served got, in words ("" when all were served)."""
        other = {k: v for k, v in self.outcomes.items() if k != "served" and v}
        if not other:
            return ""
        said = ", ".join(f"{v} {k.replace('_', ' ')}" for k, v in sorted(other.items()))
        return (
            f"; {self.outcomes.get('served', 0)} of {self.k} served, {said}: the overlap is "
            "of the served ones"
        )


@dataclass
class Preflight:
    model: str
    ok: bool = True  # every route answered right
    serialized: bool = False
    verify: dict[str, Any] = field(default_factory=dict)
    probes: list[Probe] = field(default_factory=list)
    message: str = ""

    @property
    def capped_at(self) -> float | None:
        """The smallest cap a probe measured (None: every probe overlapped fully)."""
        return min((p.cap for p in self.probes if p.cap is not None), default=None)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def verify(base_url: str, upstream_url: str, paths: list[str]) -> tuple[bool, dict[str, Any]]:
    """Each path's status and body, and the upstream's request count moving for `/io`."""
    results: dict[str, Any] = {}
    ok = True
    for path in paths:
        before = upstream_served(upstream_url)
        try:
            status, got, seconds = get(base_url, path)
        except OSError as e:
            results[path] = {"ok": False, "error": str(e)}
            ok = False
            continue
        want = expected_body(path)
        check: dict[str, Any] = {
            "status": status,
            "ok": status == 200 and got == want,
            "seconds": round(seconds, 4),
        }
        if got != want:
            check.update(expected=want.decode(), got=got[:300].decode(errors="replace"))
        if path.startswith("/io"):
            called = upstream_served(upstream_url) - before
            check["upstream_calls"] = called
            check["ok"] = check["ok"] and called >= 1
        results[path] = check
        ok = ok and check["ok"]
    return ok, results


def upstream_served(upstream_url: str) -> int:
    _, raw, _ = get(upstream_url, "/stats", timeout_s=5)
    return int(json.loads(raw)["served"])


def probe(
    base_url: str, path: str, k: int, delay_ms: float, each: Any = None, **request: Any
) -> Probe:
    """Probe k wide in two stages: first NARROW at once (a model that serialises them fails in
    NARROW delays, not k), then, only where all of those overlapped and were served, k at once,
    so a pool of 15 or 32 is seen, not hidden behind the first probe's width."""
    first = probe_once(base_url, path, min(k, NARROW), delay_ms, each, **request)
    full = first.passed and first.cap is None and first.outcomes == {"served": first.k}
    if k <= NARROW or not full:
        return first
    return probe_once(base_url, path, k, delay_ms, each, **request)


def probe_once(
    base_url: str, path: str, k: int, delay_ms: float, each: Any = None, **request: Any
) -> Probe:
    """Send k requests at once, each taking delay_ms on the server, and time them (`request`:
    get()'s method, data and headers; `each`: a route of the user's app, whose `filled()` gives
    each request its own placeholders' values). Only served answers (200) are evidence of overlap: a
    request refused at once (a 503 from an app shedding load) or failed says nothing about
    serialisation, so the overlap and the verdict come from the served ones, and what the others
    got is said beside them."""
    d = delay_ms / 1000

    def one(_: int) -> tuple[int, float, float]:
        """(status, the request's own latency, when its answer came after the probe began)."""
        sent_at = time.monotonic()
        sent = each() if each is not None else None
        where, given = (sent.path, sent.request()) if sent is not None else (path, request)
        try:
            status, _body, seconds = get(base_url, where, timeout_s=10 + k * d, **given)
        except TimeoutError:
            status, seconds = TIMED_OUT, time.monotonic() - sent_at
        except OSError:
            status, seconds = FAILED, time.monotonic() - sent_at
        return status, seconds, time.monotonic() - start

    with ThreadPoolExecutor(max_workers=k) as pool:
        start = time.monotonic()
        results = list(pool.map(one, range(k)))
        wall = time.monotonic() - start
    served = [s for status, s, _ in results if status == 200]
    # Waves are read from when answers came, on one clock: a request its thread sent late
    # (32 threads start over tens of ms on a busy machine) waits less for a slot, so its own
    # latency blurs the gap between one wave and the next; its answer's time does not.
    answered = [at for status, _, at in results if status == 200]
    n = len(served)
    served_wall = max(served, default=wall)
    limit = d + (n - 1) * d * SLACK
    overlap = round(n * d / served_wall, 2) if n else 0.0
    return Probe(
        route=path,
        k=k,
        delay_ms=delay_ms,
        wall_s=round(served_wall, 3),
        latencies_s=[round(s, 3) for _, s, _ in results],
        overlap=overlap,
        limit_s=round(limit, 3),
        passed=n < 2 or served_wall <= limit,
        cap=_cap(overlap, answered, k, d),
        outcomes=outcomes([status for status, _, _ in results]),
    )


def server_cpu_s(pid: int) -> float:
    """CPU seconds (user and system) a server's processes have used so far: read before and after
    a probe, it tells requests queued on the CPU (the GIL runs one request's Python at a time in
    each process) from requests queued on a lock, which wait without using any."""
    try:
        root = psutil.Process(pid)
        tree = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0.0
    total = 0.0
    for proc in tree:
        with contextlib.suppress(psutil.Error):
            times = proc.cpu_times()
            total += times.user + times.system
    return total


def outcomes(statuses: list[int]) -> dict[str, int]:
    """What k probe requests got: served (200), refused (429 or 5xx), timed out, failed."""
    out: dict[str, int] = {}
    for status in statuses:
        kind = (
            "served"
            if status == 200
            else "timed_out"
            if status == TIMED_OUT
            else "refused"
            if status == 429 or status >= 500
            else "failed"
        )
        out[kind] = out.get(kind, 0) + 1
    return out


def _cap(overlap: float, served: list[float], k: int, d: float) -> float | None:
    """The cap the probe measured (`served`: when each served answer came, s after the probe
    began): the served ones' first wave where their overlap fell short of K, or, where the
    server refused the rest at once, the number it served (it sheds load beyond that)."""
    if len(served) < 2:
        return None
    if len(served) < k:
        return float(len(served))
    return measured_cap(overlap, k, served, d)


def measured_cap(overlap: float, k: int, served: list[float], d: float) -> float | None:
    """About how many requests ran at once, where clearly more than one and fewer than K did:
    the first wave of the served times (`served`, s; a wave ends at a gap of half a delay `d`
    or more between one answer and the next, sorted). 32 requests against a pool of 15 come back
    as 15, 15 and 2: a cap of 15, where the overlap says 32 / 3 = 11. Answers that no such gap
    parts are one wave, however stretched (8 answers of a 53 ms route spread over 59-82 ms by
    the server's own overhead overlap 5.2 of 8, yet all ran at once): no cap."""
    if overlap >= PARTIAL * k or overlap < 1.5:
        return None
    times = sorted(served)
    gaps = [i + 1 for i in range(len(times) - 1) if times[i + 1] - times[i] >= d / 2]
    return float(gaps[0]) if gaps and gaps[0] >= 2 else None


def run(
    model: str, base_url: str, upstream_url: str, load_path: str, k: int, delay_ms: float
) -> Preflight:
    """Verify every route, then probe concurrency on the in-process sleep, on upstream I/O, and
    on the database the load path waits in (a driver gevent cannot see serialises there)."""
    paths = ["/health", "/io", f"/sleep?ms={int(delay_ms) // 10}", f"/cpu?n={DEFAULT_CPU_N}"]
    if load_path not in paths:
        paths.append(load_path)
    result = Preflight(model)
    result.ok, result.verify = verify(base_url, upstream_url, paths)
    if not result.ok:
        bad = [p for p, c in result.verify.items() if not c["ok"]]
        result.message = f"wrong answer from {', '.join(bad)}"
        return result
    if k < 2:
        result.message = "capacity 1: nothing to overlap, probe skipped"
        return result
    waits = ["/sleep?ms", "/io?delay_ms"] + [
        f"/{r}?delay_ms" for r in ("db", "cache") if load_path.startswith(f"/{r}")
    ]
    for path in waits:
        result.probes.append(probe(base_url, f"{path}={int(delay_ms)}", k, delay_ms))
    failed = [p for p in result.probes if not p.passed]
    result.serialized = bool(failed)
    if failed:
        result.message = "; ".join(
            f"{p.k} x {p.route} took {p.wall_s:.2f} s (limit {p.limit_s:.2f} s, "
            f"{p.delay_ms / 1000:.2f} s if concurrent): overlap {p.overlap} of {p.k}{p.unserved}"
            for p in failed
        )
    return result
