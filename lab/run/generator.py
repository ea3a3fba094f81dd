"""The lab's side of the load-generator protocol: start a generator process, read its messages.

Sweeps, experiments, benchmarks and tests all drive a generator through this one client; the
messages themselves are defined in `loadgen.protocol`, which the generator side uses too.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hdrh.histogram import HdrHistogram

from lab.record import hist
from lab.record.step import Measured
from lab.system import procs
from loadgen.protocol import (
    Done,
    Failed,
    Histogram,
    Measuring,
    Message,
    ProtocolError,
    Sample,
    Start,
    Window,
    decode,
)

HistogramSink = Callable[[float, float, HdrHistogram], None]
# The generator process of each engine (`Start.engine`); both speak `loadgen.protocol`.
ENGINE_MODULES = {"lab": "loadgen", "oha": "loadgen.oha"}


class Generator:
    """One generator process running one step; stop() (or the context) always ends it."""

    def __init__(
        self,
        start: Start,
        *,
        log_path: Path,
        cpus: tuple[int, ...] = (),
        pid_dir: Path | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.start = start
        module = ENGINE_MODULES.get(start.engine, "loadgen")
        argv = [sys.executable, "-m", module, start.to_json()]
        self.proc = procs.start(
            "loadgen",
            argv,
            log_path=log_path,
            cpus=cpus,
            pid_dir=pid_dir,
            pipe_stdout=True,
            env=env,
        )

    def messages(self) -> Iterator[Message]:
        """Every message the generator sends until it exits; stray lines become `Failed`."""
        stdout = self.proc.popen.stdout
        assert stdout is not None
        for raw in stdout:
            try:
                yield decode(raw.decode(errors="replace"))
            except ProtocolError as exc:
                yield Failed(str(exc))

    def stop(self, grace_s: float = 2.0) -> None:
        self.proc.stop(grace_s=grace_s)

    def __enter__(self) -> Generator:
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()


@dataclass
class Outcome:
    """What a step's generator said: the figures (None if it failed) and what came before."""

    done: Done | None = None
    started_at: str = ""
    samples: list[Sample] = field(default_factory=list)  # measured seconds only
    failure: str = ""
    counted: Counter[str] = field(default_factory=Counter)  # latencies received, per source


class IntervalMerger:
    """Merges the histograms several generator processes sent for the same second, exactly
    (counts added), and hands each second on once; one generator's pass straight through."""

    def __init__(self, sink: HistogramSink | None, counted: Counter[str]) -> None:
        self.sink, self.counted = sink, counted
        self.key: tuple[float, float] | None = None
        self.parts: list[HdrHistogram] = []
        self.drain = False
        self.whole = hist.new_histogram()  # every interval's, the drain's too
        self.max_ms: list[float] = []  # each measured second's slowest answer

    def add(self, message: Histogram) -> None:
        if (message.start_s, message.end_s) != self.key:
            self.flush()
            self.key = (message.start_s, message.end_s)
        part = hist.decode(message.encoded)
        self.counted[message.source] += part.get_total_count()
        self.parts.append(part)
        self.drain = message.drain

    def flush(self) -> None:
        """Hand the second on; the drain's interval carries the tag the `.hlog` keeps."""
        if self.key is None:
            return
        merged = hist.merge(self.parts)
        self.whole.add(merged)
        if self.drain:
            merged.set_tag(hist.DRAIN_TAG)
        else:
            self.max_ms.append(merged.get_max_value() / 1000)
        if self.sink is not None:
            self.sink(*self.key, merged)
        self.key, self.parts, self.drain = None, [], False

    def onto(self, done: Done) -> Done:
        """The step's figures with its answers by latency and each second's slowest answer
        (`max_ms`) from the histograms, so both engines' steps carry them alike."""
        series = {**done.timeseries, "max_ms": self.max_ms} if self.max_ms else done.timeseries
        spread = hist.coarse_ms(self.whole)
        return replace(done, answers_by_latency=spread, timeseries=series)


def follow(
    gen: Generator,
    outcome: Outcome | None = None,
    *,
    on_measuring: Callable[[Measuring], None] | None = None,
    on_sample: Callable[[Sample], None] | None = None,
    on_histogram: HistogramSink | None = None,
) -> Outcome:
    """Read a generator to its end, handing each message to the caller's hooks.

    Pass your own `outcome` to keep what was read when a KeyboardInterrupt cuts the step short.
    """
    outcome = Outcome() if outcome is None else outcome
    merger = IntervalMerger(on_histogram, outcome.counted)
    for message in gen.messages():
        if isinstance(message, Histogram):
            merger.add(message)
            continue
        merger.flush()
        if isinstance(message, Measuring):
            outcome.started_at = message.started_at
            if on_measuring:
                on_measuring(message)
        elif isinstance(message, Sample):
            if message.phase == "measure":
                outcome.samples.append(message)
            if on_sample:
                on_sample(message)
        elif isinstance(message, Done):
            outcome.done = message
        else:
            outcome.failure = message.message
    merger.flush()
    if outcome.done is not None:
        outcome.done = merger.onto(outcome.done)
    return outcome


def run_step(
    start: Start, log_path: Path, *, cpus: tuple[int, ...] = (), **hooks: Callable[..., None]
) -> Done:
    """Run one step to its end and return its figures (experiments, benchmarks, tests)."""
    with Generator(start, log_path=log_path, cpus=cpus) as gen:
        outcome = follow(gen, None, **hooks)
    if outcome.done is None:
        exit_code = gen.proc.popen.poll()
        raise RuntimeError(
            f"load generator ended without a result (exit {exit_code}): "
            f"{outcome.failure or gen.proc.log_tail(5)}"
        )
    return outcome.done


def measured_from(done: Done | None) -> Measured:
    """What the step record takes from a generator's figures (zeros if it sent none)."""
    if done is None:
        return Measured(started_at=datetime.now(UTC).isoformat())
    open_loop = vars(done.open_loop) if done.open_loop else None
    measured = measured_of(done, done.client_cpu_pct, done.timeseries, open_loop)
    return replace(
        measured,
        generator_lag_ms=done.generator_lag_ms,
        generator_periodic_pct=done.periodic_pct,
        all_latency_ms=done.all_latency_ms,
        failed_latency_ms=done.failed_latency_ms,
        generator_lag=done.lag,
        late_sends=done.late_sends,
        closed_loop=done.closed_loop,
        answers_100ms=tuple(done.answers_100ms),
        answers_by_latency=tuple(done.answers_by_latency),
    )


def measured_of(
    window: Window,
    client_cpu_pct: float,
    timeseries: Mapping[str, list[float]],
    open_loop: Mapping[str, Any] | None = None,
) -> Measured:
    """A measured window's figures as a step record takes them: a generator's `Done`, or a UI
    segment whose client CPU and series the UI sampled itself."""
    return Measured(
        started_at=window.started_at,
        duration_s=window.duration_s,
        requests=window.requests,
        ok=window.ok,
        errors=window.errors,
        latency_ms=window.latency_ms,
        client_cpu_pct=client_cpu_pct,
        timeseries=timeseries,
        open_loop=open_loop,
    )
