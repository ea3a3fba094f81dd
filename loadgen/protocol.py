"""The messages between the lab and a load-generator process, typed on both sides.

The lab starts `python -m loadgen START_JSON` (a `Start`); the generator answers on stdout with
one JSON line per message: `Measuring` when the measured window opens, a `Sample` every second
(settle and measure phases), a `Histogram` after every measured second (the interval's latencies,
HdrHistogram-encoded, so the lab writes the `.hlog` and can merge several generators exactly; with
several generator processes one per process and second, named by `source`), and finally `Done`
(the step's figures) or `Failed`. Plain data and the standard library only (the login step is
`lab.record.login`'s record): the lab imports this without gevent's monkey-patching, which only
the generator processes do.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from lab.record.login import Login

ARRIVALS = ("constant", "poisson")


class ProtocolError(ValueError):
    """A line that is not a message of this protocol."""


CONNECT_WAIT_S = 30.0  # distributed: for every worker to connect; the lab's watchdog allows for it
# A worker's exit status (`loadgen.worker_node`): what it served, for `lab generator --steps`.
SERVED_STEP = 0  # a measured step
SERVED_WARMUP = 10  # a warm-up (not a step the user counts)
SERVED_NOTHING = 11  # the master quit before sending a step (e.g. other generators missing)


def missing_generators(connected: int, local: int, remote: int, timeout_s: float) -> str:
    """The `Failed` message of a step whose generators did not all connect: what to do."""
    words = (
        f"only {connected} of {local + remote} generator processes connected within "
        f"{timeout_s:.0f} s"
    )
    if remote and connected >= local:
        return (
            f"{words}: {local + remote - connected} of the {remote} remote generator(s) did not "
            "come or left (`lab generator --connect HOST:PORT` serves --steps measured steps and "
            "leaves; --steps 0 serves every step until the run ends)"
        )
    return f"{words} (remote ones: `lab generator --connect HOST:PORT`)"


@dataclass(frozen=True)
class Start:
    """What one step asks of a generator. Closed loop: `users`; open loop: `rate_rps`."""

    base_url: str  # e.g. http://127.0.0.1:18080
    path: str  # e.g. /io
    settle_s: float  # after starting, before measuring: excluded from every figure
    duration_s: float  # the measured window
    timeout_s: float  # per request
    expected_body: str | None = None  # a 2xx with another body counts as a "bad_body" error
    users: int = 0  # closed loop: simultaneous users, no think time
    rate_rps: float | None = None  # open loop: target arrival rate
    max_outstanding: int = 0  # open loop: requests in flight at most; the rest are dropped
    arrival: str = "constant"  # open loop: "constant" spacing or "poisson" (same mean)
    seed: int | None = None  # open loop: a reproducible Poisson schedule
    generators: int = 1  # local generator processes (locust workers): users or arrivals shared
    remote_generators: int = 0  # workers started elsewhere (`lab generator --connect`)
    master: str = "127.0.0.1:0"  # where the locust master binds for its workers (0: any port)
    generator_cpus: tuple[int, ...] = ()  # cores for the local workers, one each (round robin)
    method: str = "GET"  # a user's app may be loaded with another method, a body and headers
    body: str | None = None  # sent with every method but GET
    headers: dict[str, str] = field(default_factory=dict)
    # A traffic mix (`lab.config.mix.MixRoute`): [{"label", "method", "path", "weight", "body",
    # "headers", "expect"}]; empty: `path`.
    mix: list[dict[str, Any]] = field(default_factory=list)
    # Placeholders (`lab.record.placeholders`): {n} is n_base + n_index + n_stride * k, so no two
    # generator processes of a step, and no two steps of a run, send one value; {user} counts
    # from user_base (the users, or the cap, of the generators before this one).
    n_base: int = 0
    n_index: int = 0
    n_stride: int = 1
    user_base: int = 0
    warmup: bool = False  # a warm-up: nothing kept (a remote generator does not count it a step)
    # Open loop on several generators (`loadgen.shares`): this one's schedule starts `offset_s`
    # after `begin_at` (wall clock, time.time()), so that the schedules of all of them interleave.
    offset_s: float = 0.0
    begin_at: float = 0.0  # 0: at once
    # What sends the requests (`lab.run.engine`): "lab" (this package's loops) or "oha" (an
    # open- or closed-loop step on oha, `loadgen.oha`, at `engine_path`).
    engine: str = "lab"
    engine_path: str = ""
    # A login each user sends once before its first request, its cookies kept for all its later
    # ones (`loadgen.session`); None: anonymous users, no cookies kept.
    login: Login | None = None

    @property
    def distributed(self) -> bool:
        """Several generator processes: a locust master here and its workers."""
        return self.generators > 1 or self.remote_generators > 0

    @property
    def mode(self) -> str:
        return "closed" if self.rate_rps is None else "open"

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Start:
        data = json.loads(text)
        data["generator_cpus"] = tuple(data.get("generator_cpus") or ())
        data["login"] = Login.of(data["login"]) if data.get("login") else None
        start: Start = _build(cls, data)
        return start


@dataclass(frozen=True)
class Measuring:
    """The measured window starts now (settle is over)."""

    started_at: str  # ISO 8601 UTC


@dataclass(frozen=True)
class Sample:
    """One second of progress: live figures while settling, measured ones while measuring."""

    phase: str  # "settle" or "measure"
    t: float  # seconds since the phase began
    client_cpu_pct: float
    live_requests: int  # every completion so far, measured or not (for the progress display)
    live_errors: int
    rps: float = 0.0
    errors: int = 0
    p50_ms: float = 0.0
    p99_ms: float = 0.0
    dropped: int = 0  # open loop: due this second while the cap was full
    inflight: int = 0  # open loop: requests outstanding at the end of the second
    lag_p99_ms: float = 0.0  # how late the generators' event loops woke this second: p99
    lag_max_ms: float = 0.0  # and the longest


@dataclass(frozen=True)
class Histogram:
    """One measured second's latencies (µs), HdrHistogram's compressed base64 encoding."""

    start_s: float
    end_s: float
    encoded: str
    source: str = ""  # which generator process measured it ("" when there is one)
    # Open loop: the drain after the window (its late answers and unfinished requests' ages):
    # part of the step's latency, never a second of its series nor of the bootstrap.
    drain: bool = False


@dataclass(frozen=True)
class OpenLoopFigures:
    """What only an open-loop step has."""

    rate_rps: float
    achieved_rate_rps: float  # sends per second between the window's first and last send
    sent: int
    dropped: int  # due while the cap was full: never sent
    unfinished: int  # sent, still unanswered at the cut-off (the window's end plus the drain)
    service_latency_ms: dict[str, float]  # from actual send: what a closed loop would report
    scheduled: int = 0  # arrivals due in the window: sent + not_sent
    completed: int = 0  # answered (ok or failed), in the window or during the drain
    not_sent: int = 0  # = dropped
    ok_in_window: int = 0  # ok answers inside the window, whenever due: the throughput
    drain_s: float = 0.0  # how long the window's requests were waited for after it closed
    lower_bounds: tuple[str, ...] = ()  # latency keys that are lower bounds (unfinished ages)
    all_lower_bounds: tuple[str, ...] = ()  # all_latency_ms keys that are (dropped, unfinished)
    send_lateness_ms: dict[str, float] = field(default_factory=dict)  # actual send - intended


@dataclass(frozen=True)
class Part:
    """One generator process's share of a step run by several."""

    source: str
    requests: int
    ok: int
    cpu_pct: float  # mean over the measured window, 100 = one core
    cpus: list[int]  # the cores it was pinned to (empty: not pinned)
    lag_ms: dict[str, float] = field(default_factory=dict)  # its loop lag: p50, p99, max, mean
    periodic_pct: float = -1.0  # share of the window in its own periodic work (-1: unknown)
    open_loop: dict[str, Any] | None = None  # open loop: its own OpenLoopFigures


@dataclass(frozen=True)
class Window:
    """What was measured in a window, the makings of a step record: a step's `Done`, or a UI
    segment (`loadgen.live.Segment`). Latency of successful requests only, from each request's
    start (open loop: from its intended start)."""

    started_at: str
    duration_s: float
    requests: int
    ok: int
    errors: dict[str, int]
    latency_ms: dict[str, float]


@dataclass(frozen=True)
class Done(Window):
    """The step's figures."""

    client_cpu_pct: float  # every generator process together (master included), 100 = one core
    timeseries: dict[str, list[float]] = field(default_factory=dict)
    open_loop: OpenLoopFigures | None = None
    parts: list[Part] = field(default_factory=list)  # several generator processes: each one's
    # how late the generators' event loops woke (every load-carrying process's merged; {}: unknown)
    generator_lag_ms: dict[str, float] = field(default_factory=dict)
    periodic_pct: float = -1.0  # the busiest generator's share of the window in periodic work
    # Every request counted, not only the survivors: failed requests' latency by kind (open
    # loop: "dropped", arrivals the cap kept back, timed to when a slot freed: a lower bound), and
    # every request's together (ok, failed, dropped and unfinished).
    failed_latency_ms: dict[str, dict[str, float]] = field(default_factory=dict)
    all_latency_ms: dict[str, float] = field(default_factory=dict)
    # What the instrument's error per request is read from (encoded HdrHistograms, µs; "":
    # unknown or none): the generators' loop lag over the window, and open-loop sends' lateness.
    lag: str = ""
    late_sends: str = ""
    # Closed loop: the window's requests counted by their send, whenever they answered
    # (`loadgen.closed_loop.ClosedLoop`, on one process or each of several): unfinished,
    # ok_in_window, drain_s, lower_bounds, all_lower_bounds ({}: counted by the clock, an older
    # generator).
    closed_loop: dict[str, Any] = field(default_factory=dict)
    # A mix: each route's figures (`loadgen.request.RouteTally.figures`) by label ({}: one route).
    routes: dict[str, dict[str, Any]] = field(default_factory=dict)
    # A login step (`Start.login`): every user's login, counted and timed apart from the mix
    # (`loadgen.request.RouteTally.figures`; {}: no login).
    login: dict[str, Any] = field(default_factory=dict)
    # The window's answers per 100 ms, by when they arrived (either engine): a pause shorter
    # than a second shows here, never in the per-second series (`lab.verdict.pauses`).
    answers_100ms: list[int] = field(default_factory=list)
    # The window's answers by latency, filled by the lab from the step's histograms whatever the
    # engine (`lab.run.generator.follow`; `lab.record.hist.coarse_ms`'s pairs).
    answers_by_latency: tuple[tuple[float, int], ...] = ()


ANSWER_TICK_S = 0.1  # `Done.answers_100ms`'s bin: a pause of 200 ms shows as an empty bin or two


@dataclass(frozen=True)
class Failed:
    """The generator could not run the step."""

    message: str


Message = Measuring | Sample | Histogram | Done | Failed
_TYPES: dict[str, type[Any]] = {
    "measuring": Measuring,
    "sample": Sample,
    "histogram": Histogram,
    "done": Done,
    "failed": Failed,
}
_NAMES = {cls: name for name, cls in _TYPES.items()}


def encode(message: Message) -> str:
    """One line of JSON, without the newline."""
    return json.dumps({"type": _NAMES[type(message)], **asdict(message)})


def decode(line: str) -> Message:
    """The message on one line; `ProtocolError` for anything else (e.g. a stray print)."""
    try:
        data = json.loads(line)
        cls = _TYPES[data.pop("type")]
        if cls is Done and data.get("open_loop") is not None:
            data["open_loop"] = _build(OpenLoopFigures, data["open_loop"])
        if cls is Done:
            data["parts"] = [_build(Part, p) for p in data.get("parts") or []]
        message: Message = _build(cls, data)
        return message
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ProtocolError(f"not a load-generator message: {line[:120]!r} ({exc})") from None


def _build(cls: type[Any], data: dict[str, Any]) -> Any:
    known = {f.name for f in fields(cls)}
    return cls(**{k: v for k, v in data.items() if k in known})
