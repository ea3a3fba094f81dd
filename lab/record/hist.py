"""Latency histograms: HdrHistogram in microseconds, 3 significant digits, kept as `.hlog` files.

Locust's own percentiles are rounded to about two significant digits, so every latency the lab
reports comes from these histograms instead. An `.hlog` holds one interval histogram per second of
a step, so the same file gives both the whole-step distribution (merge all intervals) and the
per-second time series.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

from hdrh.histogram import HdrHistogram
from hdrh.log import HistogramLogReader, HistogramLogWriter

LOWEST_US = 1
HIGHEST_US = 3_600_000_000  # one hour: no request the lab makes can be slower than that
SIGNIFICANT_DIGITS = 3
PERCENTILES = {"p50": 50.0, "p90": 90.0, "p99": 99.0, "p999": 99.9}


def new_histogram() -> HdrHistogram:
    return HdrHistogram(LOWEST_US, HIGHEST_US, SIGNIFICANT_DIGITS)


def record_ms(hist: HdrHistogram, latency_ms: float) -> None:
    """Record one latency given in milliseconds (locust's unit) as whole microseconds."""
    hist.record_value(min(max(round(latency_ms * 1000), LOWEST_US), HIGHEST_US))


def summary_ms(hist: HdrHistogram) -> dict[str, float]:
    """p50, p90, p99, p999, max and mean in milliseconds; zeros for an empty histogram."""
    if hist.get_total_count() == 0:
        return {**{k: 0.0 for k in PERCENTILES}, "max": 0.0, "mean": 0.0}
    out = {k: hist.get_value_at_percentile(p) / 1000 for k, p in PERCENTILES.items()}
    out["max"] = hist.get_max_value() / 1000
    out["mean"] = round(hist.get_mean_value() / 1000, 3)
    return out


def encode(hist: HdrHistogram) -> str:
    """HdrHistogram's compressed base64 form: how a generator sends one second to the lab."""
    encoded: bytes = hist.encode()
    return encoded.decode("ascii")


def decode(encoded: str) -> HdrHistogram:
    """The histogram `encode` sent, in the lab's own range and precision."""
    out = new_histogram()
    out.add(HdrHistogram.decode(encoded.encode("ascii")))
    return out


def merge(hists: Iterable[HdrHistogram]) -> HdrHistogram:
    """Merge histograms by adding counts: the only correct way to combine percentiles."""
    total = new_histogram()
    for h in hists:
        total.add(h)
    return total


class HlogWriter:
    """An `.hlog` written interval by interval, so a long step never holds all its seconds."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.file = open(path, "w")  # noqa: SIM115 - closed by close() / the context manager
        self.writer = HistogramLogWriter(self.file)
        self.writer.output_comment("concurrency-lab latency log, values in microseconds")
        self.writer.output_legend()

    def write(self, start_s: float, end_s: float, hist: HdrHistogram) -> None:
        self.writer.output_interval_histogram(hist, start_s, end_s, max_value_unit_ratio=1000.0)
        self.file.flush()

    def close(self) -> None:
        self.file.close()

    def __enter__(self) -> HlogWriter:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def write_hlog(path: Path, intervals: Iterable[tuple[float, float, HdrHistogram]]) -> None:
    """Write (start_s, end_s, histogram) intervals as an HdrHistogram log (values in µs)."""
    with HlogWriter(path) as out:
        for start, end, hist in intervals:
            out.write(start, end, hist)


def read_hlog(path: Path) -> Iterator[HdrHistogram]:
    """Yield each interval histogram of an `.hlog` in order (start via get_start_time_stamp)."""
    reader = HistogramLogReader(str(path), new_histogram())
    while (hist := reader.get_next_interval_histogram()) is not None:
        copy = new_histogram()
        copy.add(hist)
        copy.set_start_time_stamp(hist.get_start_time_stamp())
        copy.set_end_time_stamp(hist.get_end_time_stamp())
        yield copy


def load_hlog(path: Path) -> HdrHistogram:
    """The whole-step histogram: every interval of the log merged."""
    return merge(read_hlog(path))
