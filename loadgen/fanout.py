"""What a generator master and its workers say to each other, over locust's own master/worker link.

Why locust's link: it already connects, beats hearts and quits them (and spreads the web UI's
users); the lab only adds its own messages on it. The master sends the step (`START`), then asks
for one interval (`ROLL`) every second; each worker answers (`INTERVAL`) with the HdrHistogram of
what it measured since its last answer, so the master never merges percentiles, only counts
(exact), and no request is counted twice or lost between intervals.

On several generators (`loadgen.shares`) the master sends each worker its own share of the step
(`START` to that worker alone: its schedule, or its users); each times its own window from the
common start and, after its drain, sends what is left (`DRAINED`): the drain's interval and its
own open- or closed-loop figures.

A step on oha (`loadgen.oha.remote`) sends its remote generators their shares the same way;
each runs its own oha and, once it exits, sends its records whole (`OHA_RECORDS`): no rolls.

The web UI's lab page uses the same roll with locust's own workers (Compose): each answers
(`MODELS_INTERVAL`) with one interval per model, since one UI run loads several models at once.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import Field, asdict, dataclass, field
from typing import Any, ClassVar, Self

from lab.record import hist
from loadgen.protocol import OpenLoopFigures
from loadgen.recording import Interval
from loadgen.request import RouteTally
from loadgen.shares import ClosedShare, ShareResult

READY = "lab_ready"  # worker -> master: its handlers are registered, it may be sent work
START = "lab_start"  # master -> workers: the step's Start, as JSON
ROLL = "lab_roll"  # master -> workers: {"seq": n}, end your interval now
INTERVAL = "lab_interval"  # worker -> master: a Report
DRAINED = "lab_drained"  # worker -> master, after its drain: a Drained
MODELS_INTERVAL = "lab_models_interval"  # web-UI worker -> master: a ModelsReport
# worker -> master, a step on oha: {"blob": its share's records (`loadgen.oha.wire`), "failed":
# why there are none, or ""}
OHA_RECORDS = "lab_oha_records"
REPORT_TIMEOUT_S = 5.0  # a worker silent this long for one roll reports at the next one instead


class _Fields:
    """A message between the generator's processes that crosses as its dataclass fields, as they
    are, and is rebuilt from them (Drained rebuilds its nested ones itself)."""

    __dataclass_fields__: ClassVar[dict[str, Field[Any]]]

    def to_data(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_data(cls, data: dict[str, Any]) -> Self:
        return cls(**data)


@dataclass(frozen=True)
class Report(_Fields):
    """One worker's answer to a roll: its interval and its running counters."""

    seq: int
    encoded: str  # the interval's HdrHistogram
    requests: int
    errors: dict[str, int]
    live_requests: int
    live_errors: int
    cpu_pct: float  # since its previous report, 100 = one core
    cpus: list[int] = field(default_factory=list)
    lag: str = ""  # the interval's loop lag, an encoded HdrHistogram ("": unknown)
    periodic_s: float = 0.0  # its own periodic work since its previous report
    dropped: int = 0  # open loop: due since the last report while the cap was full
    inflight: int = 0  # open loop: requests outstanding now
    bounds: int = 0  # open loop: unanswered requests' ages in the histogram (not answers)
    failed: dict[str, str] = field(default_factory=dict)  # failed latencies by kind, encoded
    late_sends: str = ""  # open loop: its sends' lateness, encoded ("": none)
    routes: dict[str, dict[str, Any]] = field(default_factory=dict)  # a mix: RouteTally figures
    answers: int = -1  # answers that arrived in the interval, whenever sent or due (-1: unknown)
    ticks: dict[str, int] = field(default_factory=dict)  # its answers per 100 ms bin (`Interval`)

    @classmethod
    def of(
        cls, seq: int, interval: Interval, live: tuple[int, int], cpu_pct: float, cpus: list[int]
    ) -> Report:
        encoded = hist.encode(interval.hist)
        errors = dict(interval.errors)
        lag = hist.encode(interval.lag) if interval.lag is not None else ""
        late = interval.late_sends
        late_sends = hist.encode(late) if late is not None else ""
        return cls(
            *(seq, encoded, interval.requests, errors, *live, cpu_pct, cpus),
            *(lag, interval.periodic_s),
            bounds=interval.bounds,
            failed={k: hist.encode(h) for k, h in interval.failed.items()},
            late_sends=late_sends,
            routes={name: tally.figures() for name, tally in interval.routes.items()},
            answers=-1 if interval.answers is None else interval.answers,
            ticks={str(i): n for i, n in interval.ticks.items()},
        )

    def interval(self) -> Interval:
        lag = hist.decode(self.lag) if self.lag else None
        errors = Counter(self.errors)
        encoded = hist.decode(self.encoded)
        failed = {k: hist.decode(e) for k, e in self.failed.items()}
        late = hist.decode(self.late_sends) if self.late_sends else None
        routes = {name: RouteTally.of(figures) for name, figures in self.routes.items()}
        return Interval(
            *(encoded, self.requests, errors, self.bounds, lag, self.periodic_s, failed, late),
            routes=routes,
            answers=None if self.answers < 0 else self.answers,
            ticks=Counter({int(i): n for i, n in self.ticks.items()}),
        )


@dataclass(frozen=True)
class Drained(_Fields):
    """A worker's last word after its drain: the drain's interval (a Report) and its own
    figures, open loop (`share`) or closed loop (`closed`), and its users' logins."""

    report: Report
    share: ShareResult | None = None
    closed: ClosedShare | None = None
    login: dict[str, Any] = field(default_factory=dict)  # its users' logins (RouteTally figures)

    @classmethod
    def from_data(cls, data: dict[str, Any]) -> Drained:
        report, login = Report.from_data(data["report"]), data.get("login") or {}
        if (closed := data.get("closed")) is not None:
            return cls(report, closed=ClosedShare(**closed), login=login)
        share = data["share"]
        figures = OpenLoopFigures(
            **{**share["figures"], "lower_bounds": (), "all_lower_bounds": ()}
        )
        return cls(report, ShareResult(**{**share, "figures": figures}), login=login)


@dataclass(frozen=True)
class ModelsReport(_Fields):
    """A web-UI worker's answer to a roll: each model's interval and the worker's CPU."""

    seq: int
    cpu_pct: float  # since its previous report, 100 = one core
    models: dict[str, dict[str, Any]]  # model -> {"encoded", "requests", "errors"}

    @classmethod
    def of(cls, seq: int, intervals: dict[str, Interval], cpu_pct: float) -> ModelsReport:
        models = {
            m: {"encoded": hist.encode(i.hist), "requests": i.requests, "errors": dict(i.errors)}
            for m, i in intervals.items()
        }
        return cls(seq, cpu_pct, models)

    def intervals(self) -> dict[str, Interval]:
        return {
            model: Interval(hist.decode(m["encoded"]), int(m["requests"]), Counter(m["errors"]))
            for model, m in self.models.items()
        }
