"""oha's records of a step's window as the lab's: the per-second histograms, the failures by kind,
the counts and the open- or closed-loop figures, exactly as the lab's own loops fill them.

What oha keeps (1.16, `--db-url`): one row per request that got an HTTP response, any status,
with its intended start (`--latency-correction`: when its rate limiter made it due), its actual
send, its end, its status and its body's length, in seconds from oha's own start. Its CSV output
(`--output-format csv`) has the actual send and the duration from the intended start but neither
the intended start nor the end, so the database is the exact source. Requests that failed without
a response (refused, reset, timed out) are only counted, by oha's error message: no time is kept.

How the lab's rules carry over (`loadgen.open_loop` is the reference):
- oha runs the settle and the window as one (`-z`); a request counts when it was due inside the
  window (its intended start, on oha's clock, past the settle), whenever it answers; oha's rate
  limiter stops at the deadline, so nothing due after the window is sent;
- an answer goes to the second it arrived in; the window's answers after it go to the drain's
  interval (tagged, in the step's latency, never a second of its series); the throughput counts
  every answer that arrived inside the window, the settle's late ones too, as the lab's does;
- ok: a status under 400 and, where the body is checked, a body of the expected length (oha keeps
  the length, not the body: a wrong body of the same length passes);
- a failure oha only counted has no time, nor is it known whether it was due in the settle or the
  window: the window takes as many as its own arrivals leave room for (those due in it that oha
  kept no row of), all of them in the usual case (no failure in the settle, or nothing left
  unsent at the deadline), else shared over the kinds in proportion; each is a lower bound, a
  timeout at the request timeout (from its send; from its intended start at least that), any
  other at 0 ms, in no second of the series;
- arrivals due in the window that oha never sent (every connection busy at the deadline: its
  queue is dropped unreported) are `dropped`: the window's arrivals minus those it reported
  (less the last TIMER_SLACK_S of them, which its timer may not have made due), each timed from
  the deadline to oha's end, a lower bound as the lab's dropped arrivals are;
- oha waits for every request it sent (`--wait-ongoing-requests-after-deadline`, bounded by the
  request timeout), so nothing is unfinished except a request it aborted at the deadline.
Closed loop (`-c N` without `-q`: each connection sends as soon as its answer arrived) keeps the
same rows without an intended start: a request is timed from its send and counts when it was sent
inside the window, whenever it answers (`loadgen.closed_loop`'s rule); nothing is scheduled, so
nothing is dropped, and the failures oha only counted (no time) are shared between the settle and
the window by their lengths (`closed_room`), which is exact for a steady failure rate.
Several oha processes (the rate or the users split over cores) are merged exactly: counts added,
histograms added, each process's seconds counted from its own start.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np
from hdrh.histogram import HdrHistogram

from lab.record import hist
from loadgen.protocol import ANSWER_TICK_S

# oha's rate limiter wakes on tokio's millisecond timer and makes nothing due once its deadline
# has passed: the arrivals of the window's last moments it woke for too late were never due to
# it. Only arrivals beyond that many seconds' worth count as never sent (`dropped`).
TIMER_SLACK_S = 0.002
# oha's error messages (its ClientError's text and the OS's) -> the lab's kinds; first match.
MESSAGE_KINDS = (
    ("aborted due to deadline", "unfinished"),
    ("timeout", "timeout"),
    ("timed out", "timeout"),
    ("refused", "refused"),
    ("reset", "reset"),
    ("broken pipe", "reset"),
    ("closed", "reset"),
)


# hyper's words for a request sent on a kept-alive connection the server had closed after its
# last answer (uWSGI's `--http-socket` closes each one without saying `Connection: close`): the
# request never reached the server, and oha's connection opens anew for the next one.
STALE_CONNECTION = (
    "connection closed before message completed",
    "operation was canceled",
    "connection error",
)


def reconnects(errors: dict[str, int], answered: int) -> tuple[dict[str, int], int]:
    """Closed loop: oha's failures that were a reconnect, not a request (its connection was
    closed after the last answer), and the failures left. At most one per answered request:
    only an answer's close makes a connection stale, so any beyond that stay failures (a
    server that closes connections before answering is failing, whatever hyper calls it). The
    lab's own engine reconnects the same way, silently (geventhttpclient resends once)."""
    left = dict(errors)
    room = max(0, answered)
    for message in [m for m in left if any(w in m.lower() for w in STALE_CONNECTION)]:
        taken = min(left[message], room)
        room -= taken
        left[message] -= taken
    return {m: n for m, n in left.items() if n}, max(0, answered) - room


def kind_of(message: str) -> str:
    """The lab's error kind for one of oha's error messages ("unfinished": aborted unanswered)."""
    text = message.lower()
    return next((kind for words, kind in MESSAGE_KINDS if words in text), "other")


@dataclass(frozen=True)
class OhaRun:
    """One oha process's window: its rows (seconds from its start) and what it only counted."""

    intended: np.ndarray
    sent: np.ndarray
    end: np.ndarray
    status: np.ndarray
    size: np.ndarray
    errors: dict[str, int]  # oha's error message -> count
    total_s: float  # oha's own time: the settle, the window and the wait for its requests
    scheduled: int  # arrivals its rate limiter made due inside the window (closed: closed_room)
    source: str = ""
    rate_rps: float = 0.0  # its share of the step's rate
    cpu_pct: float = 0.0
    cpus: tuple[int, ...] = ()
    reconnects: int = 0  # closed loop: the window's share of them (not requests, not errors)


@dataclass(frozen=True)
class Spec:
    """What the step asked for, as the figures need it."""

    rate_rps: float
    settle_s: float  # oha runs the settle and the window as one: the window opens this late
    window_s: float
    timeout_s: float
    expected_size: int | None  # the checked body's length (None: not checked)
    closed: bool = False  # a closed loop: no rate, no schedule, nothing dropped

    def closed_room(self, kept: int, counted: int) -> int:
        """Closed loop: how many of oha's only-counted failures (`counted`, the settle's and the
        window's) the window's requests take beside the `kept` rows sent in it (`OhaRun.scheduled`
        there): their share of the whole run by time."""
        whole = max(self.settle_s + self.window_s, 1e-9)
        return kept + round(counted * self.window_s / whole)

    def rate_rps_of(self, run: OhaRun) -> float:
        """One process's share of the rate."""
        return run.rate_rps or self.rate_rps


@dataclass
class Tally:
    """One process's figures, or several merged (counts and histograms added)."""

    seconds: list[HdrHistogram]
    answers: list[int]
    errors_per_s: list[int]
    inflight: list[int]
    drain: HdrHistogram = field(default_factory=hist.new_histogram)
    failed: dict[str, HdrHistogram] = field(default_factory=dict)
    errors: Counter[str] = field(default_factory=Counter)
    service: HdrHistogram = field(default_factory=hist.new_histogram)
    late: HdrHistogram = field(default_factory=hist.new_histogram)
    counts: Counter[str] = field(default_factory=Counter)  # requests, ok, sent, dropped, ...
    achieved_rps: float = 0.0
    drain_s: float = 0.0
    floor: float | None = None  # the youngest unfinished request's age, ms
    ticks: list[int] = field(default_factory=list)  # answers per ANSWER_TICK_S, as `answers`
    all_floor: float | None = None  # the shortest lower bound of any request, ms

    def fail(self, kind: str, latency_ms: float, count: int = 1) -> None:
        record(self.failed.setdefault(kind, hist.new_histogram()), latency_ms, count)

    def bound(self, latency_ms: float, unfinished: bool) -> None:
        """A lower bound recorded: the shortest marks where percentiles become bounds (`≥`)."""
        if unfinished:
            self.floor = latency_ms if self.floor is None else min(self.floor, latency_ms)
        least = self.all_floor
        self.all_floor = latency_ms if least is None else min(least, latency_ms)


def record(h: HdrHistogram, latency_ms: float, count: int = 1) -> None:
    """`count` requests of one latency (ms), as `hist.record_ms` records one."""
    us = min(max(round(latency_ms * 1000), hist.LOWEST_US), hist.HIGHEST_US)
    h.record_value(us, count)


def tally(run: OhaRun, spec: Spec) -> Tally:
    """One oha process's window in the lab's terms."""
    n = max(1, math.ceil(spec.window_s - 1e-9))
    run = shifted(run, spec.settle_s)
    ok = run.status < 400
    if spec.expected_size is not None:
        ok &= run.size == spec.expected_size
    arrived = ok & (run.end >= 0) & (run.end < spec.window_s)  # answers in the window
    due = run.intended >= 0  # the window's requests: the settle's are in no figure but these
    t = Tally([hist.new_histogram() for _ in range(n)], [0] * n, [0] * n, _inflight(run, n, spec))
    t.answers = np.bincount(np.floor(run.end[arrived]).astype(int), minlength=n)[:n].tolist()
    bins = int(spec.window_s / ANSWER_TICK_S + 1e-6)  # whole bins, as the lab's generator
    tick = np.floor(run.end[arrived] * (1 / ANSWER_TICK_S)).astype(int)
    t.ticks = np.bincount(tick, minlength=bins)[:bins].tolist()
    mine = shifted(run, 0.0, due)
    _timed(t, mine, ok[due], spec)
    _untimed(t, mine, run.errors, spec)
    _counts(t, mine, int(ok[due].sum()), int(arrived.sum()))
    t.counts["reconnects"] = run.reconnects
    return t


def shifted(run: OhaRun, by_s: float, keep: np.ndarray | None = None) -> OhaRun:
    """The run's rows `by_s` earlier (the window's opening at 0), only those in `keep`."""
    mask = np.ones(len(run.status), bool) if keep is None else keep
    return replace(
        run,
        intended=run.intended[mask] - by_s,
        sent=run.sent[mask] - by_s,
        end=run.end[mask] - by_s,
        status=run.status[mask],
        size=run.size[mask],
    )


def _timed(t: Tally, run: OhaRun, ok: np.ndarray, spec: Spec) -> None:
    """The window's requests oha kept: answers by the second they arrived in (after the window:
    the drain), failures by kind; the answers' service time and every send's lateness."""
    latency_ms = (run.end - run.intended) * 1000
    second = np.where(run.end < spec.window_s, np.floor(run.end), -1).astype(int)
    for i, is_ok, ms, status in zip(second, ok, latency_ms, run.status, strict=True):
        if is_ok:
            hist.record_ms(t.seconds[i] if i >= 0 else t.drain, float(ms))
            continue
        kind = "http_5xx" if status >= 500 else "http_4xx" if status >= 400 else "bad_body"
        t.errors[kind] += 1
        t.fail(kind, float(ms))
        if i >= 0:
            t.errors_per_s[i] += 1
    for ms in (run.end - run.sent)[ok] * 1000:
        hist.record_ms(t.service, float(ms))
    for ms in (run.sent - run.intended) * 1000:
        hist.record_ms(t.late, float(ms))


def _inflight(run: OhaRun, n: int, spec: Spec) -> list[int]:
    """Requests in flight at the end of each second (those with a response: the rest untimed)."""
    ends = [min(i + 1.0, spec.window_s) for i in range(n)]
    sent = np.sort(run.sent)
    done = np.sort(run.end)
    return [
        int(np.searchsorted(sent, e, "right") - np.searchsorted(done, e, "right")) for e in ends
    ]


def in_window(errors: dict[str, int], room: int) -> Counter[str]:
    """The failures oha only counted (no time: the settle's and the window's together) that
    belong to the window, by kind: all of them where the window's arrivals leave room for them
    all (`room`: due in the window, not among its kept rows), else that many, shared out over
    the kinds in proportion (largest remainders)."""
    kinds = Counter[str]()
    for message, count in errors.items():
        kinds[kind_of(message)] += count
    total = sum(kinds.values())
    if total <= room:
        return +kinds
    shares = {k: c * room / total for k, c in kinds.items()}
    out = Counter({k: math.floor(v) for k, v in shares.items()})
    for k in sorted(shares, key=lambda k: shares[k] - out[k], reverse=True)[
        : room - sum(out.values())
    ]:
        out[k] += 1
    return +out


def _untimed(t: Tally, run: OhaRun, errors: dict[str, int], spec: Spec) -> None:
    """The window's failures oha only counted, and arrivals it never sent: lower bounds, in no
    second."""
    t.drain_s = max(0.0, run.total_s - spec.settle_s - spec.window_s)
    late_ms = t.drain_s * 1000  # due by the deadline, still without an answer at oha's end
    kept = len(run.status)
    mine = in_window(errors, max(0, run.scheduled - kept))
    for kind, count in mine.items():
        if kind == "unfinished":
            record(t.drain, late_ms, count)  # an unfinished age is in the latency, as a bound
            t.counts["unfinished"] += count
            t.bound(late_ms, unfinished=True)
            continue
        ms = spec.timeout_s * 1000 if kind == "timeout" else 0.0
        t.errors[kind] += count
        t.fail(kind, ms, count)
        t.bound(ms, unfinished=False)
    t.counts["untimed"] = sum(mine.values())
    slack = math.ceil(spec.rate_rps_of(run) * TIMER_SLACK_S)  # due as its timer passed the end
    dropped = max(0, run.scheduled - kept - t.counts["untimed"] - slack)
    if dropped:
        t.fail("dropped", late_ms, dropped)
        t.bound(late_ms, unfinished=False)
    t.counts["dropped"] = dropped


def _counts(t: Tally, run: OhaRun, ok: int, ok_in_window: int) -> None:
    """The window's counts; the achieved rate over its sends."""
    sent = len(run.status) + t.counts["untimed"]
    t.counts.update(requests=sent, ok=ok, ok_in_window=ok_in_window, sent=sent, completed=sent)
    t.counts["completed"] -= t.counts["unfinished"]
    sends = np.sort(run.sent)
    span = float(sends[-1] - sends[0]) if len(sends) > 1 else 0.0
    t.achieved_rps = (len(sends) - 1) / span if span > 0 else 0.0


def merged(tallies: Sequence[Tally]) -> Tally:
    """Several processes' figures as one: every count and histogram added, second by second."""
    first, *rest = tallies
    out = Tally(
        [hist.merge(hs) for hs in zip(*(t.seconds for t in tallies), strict=True)],
        [sum(x) for x in zip(*(t.answers for t in tallies), strict=True)],
        [sum(x) for x in zip(*(t.errors_per_s for t in tallies), strict=True)],
        [sum(x) for x in zip(*(t.inflight for t in tallies), strict=True)],
        drain=hist.merge(t.drain for t in tallies),
        service=hist.merge(t.service for t in tallies),
        late=hist.merge(t.late for t in tallies),
        achieved_rps=sum(t.achieved_rps for t in tallies),
        drain_s=max(t.drain_s for t in tallies),
        ticks=[sum(x) for x in zip(*(t.ticks for t in tallies), strict=True)],
    )
    for t in tallies:
        out.errors.update(t.errors)
        out.counts.update(t.counts)
        for kind, h in t.failed.items():
            out.failed.setdefault(kind, hist.new_histogram()).add(h)
        for floor, unfinished in ((t.floor, True), (t.all_floor, False)):
            if floor is not None:
                out.bound(floor, unfinished)
    return out


def intervals(t: Tally, window_s: float) -> list[tuple[float, float, HdrHistogram, bool]]:
    """The `.hlog`'s intervals: each measured second's answers, then the drain's (tagged)."""
    n = len(t.seconds)
    out = [(float(i), min(i + 1.0, window_s), h, False) for i, h in enumerate(t.seconds)]
    return [*out, (float(n) if n else 0.0, window_s + t.drain_s, t.drain, True)]
