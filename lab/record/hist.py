"""Latency histograms: HdrHistogram in microseconds, 3 significant digits, kept as `.hlog` files.

Locust's own percentiles are rounded to about two significant digits, so every latency the lab
reports comes from these histograms instead. An `.hlog` holds one interval histogram per second of
a step, so the same file gives both the whole-step distribution (merge all intervals) and the
per-second time series.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np
from hdrh.histogram import HdrHistogram
from hdrh.log import HistogramLogReader, HistogramLogWriter

LOWEST_US = 1
HIGHEST_US = 3_600_000_000  # one hour: no request the lab makes can be slower than that
SIGNIFICANT_DIGITS = 3
# An `.hlog` interval that is not a measured second: open loop's drain after the window (its
# latencies count in the step, never in its per-second series or the bootstrap's seconds).
DRAIN_TAG = "drain"
COARSE_STEP = 1.05  # `coarse_ms`'s bins: each 5% wider than the one below
PERCENTILES = {"p50": 50.0, "p90": 90.0, "p99": 99.0, "p999": 99.9}


def new_histogram() -> HdrHistogram:
    return HdrHistogram(LOWEST_US, HIGHEST_US, SIGNIFICANT_DIGITS)


def record_ms(hist: HdrHistogram, latency_ms: float) -> None:
    """Record one latency given in milliseconds (locust's unit) as whole microseconds."""
    hist.record_value(min(max(round(latency_ms * 1000), LOWEST_US), HIGHEST_US))


def record_corrected_ms(hist: HdrHistogram, latency_ms: float, interval_ms: float) -> None:
    """Record one value (ms) with HdrHistogram's correction for an expected interval: a value of
    several intervals also records the ones a regular sampler would have seen while it waited."""
    value = min(max(round(latency_ms * 1000), LOWEST_US), HIGHEST_US)
    hist.record_corrected_value(value, round(interval_ms * 1000))


def rank(percentile: float | np.ndarray, total: float | np.ndarray) -> np.ndarray:
    """The count at a percentile, as HdrHistogram defines it: rounded, at least 1. The one rank
    every percentile of the lab uses (the generator's seconds, the analysis, the bootstrap)."""
    return np.maximum(np.floor(np.asarray(percentile) / 100 * total + 0.5), 1)


def summary_ms(hist: HdrHistogram) -> dict[str, float]:
    """p50, p90, p99, p999, max and mean in milliseconds; zeros for an empty histogram.

    Computed from the counts array at once (`bins`), as HdrHistogram defines them: hdrh's own
    Python iterators cost ~5 ms per percentile and ~250 ms for the mean, which a generator
    computing its second's figures once a second would spend with its requests waiting.
    """
    if hist.get_total_count() == 0:
        return {**{k: 0.0 for k in PERCENTILES}, "max": 0.0, "mean": 0.0}
    values, counts = bins(hist)
    cumulative = counts.cumsum()
    targets = rank(np.array(list(PERCENTILES.values())), cumulative[-1])
    at = values[np.searchsorted(cumulative, targets)]
    out = {k: float(v) / 1000 for k, v in zip(PERCENTILES, at, strict=True)}
    out["max"] = hist.get_max_value() / 1000
    medians = _index_values(*_layout(hist))[1][np.nonzero(_counts(hist))[0]]
    out["mean"] = round(float(np.dot(medians, counts) / cumulative[-1]) / 1000, 3)
    return out


def coarse_ms(hist: HdrHistogram) -> tuple[tuple[float, int], ...]:
    """The histogram's values in bins `COARSE_STEP` wide (log-spaced, 4 significant digits):
    (upper edge in ms, count) of each bin that holds any, ascending; () when empty.

    Why: a step record keeps its whole distribution in tens of pairs, not HdrHistogram's
    thousands of bins, so the verdict can read its shape (`lab.verdict.clusters`: requests
    held through a pause cluster far above the rest) with no run directory at hand.
    """
    if hist.get_total_count() == 0:
        return ()
    values, counts = bins(hist)
    step = np.ceil(np.log(np.maximum(values, 1.0) / 1000) / np.log(COARSE_STEP) - 1e-9)
    edges, at = np.unique(step, return_inverse=True)
    totals = np.bincount(at, weights=counts)
    return tuple(
        (float(f"{COARSE_STEP**e:.4g}"), int(n)) for e, n in zip(edges, totals, strict=True)
    )


def bins(hist: HdrHistogram) -> tuple[np.ndarray, np.ndarray]:
    """The recorded bins: each one's highest equivalent value (µs) and its count, as floats.

    What HdrHistogram reports for a percentile is the highest value equivalent to the bin it
    falls in; a second's histogram as these two short arrays is ~200 KB of counts less.
    """
    counts = _counts(hist)
    index = np.nonzero(counts)[0]
    return _index_values(*_layout(hist))[0][index], counts[index].astype(float)


def _counts(hist: HdrHistogram) -> np.ndarray:
    return np.ctypeslib.as_array(hist.counts)[: hist.counts_len]


def _layout(hist: HdrHistogram) -> tuple[int, int, int]:
    return hist.counts_len, hist.sub_bucket_half_count_magnitude, hist.unit_magnitude


@functools.cache
def _index_values(counts_len: int, half_magnitude: int, unit: int) -> tuple[np.ndarray, ...]:
    """Per counts index: the highest and the median equivalent value, as hdrh computes them
    one index at a time (`get_value_from_index`, `get_highest_equivalent_value`)."""
    index = np.arange(counts_len, dtype=np.int64)
    half = 1 << half_magnitude
    bucket = (index >> half_magnitude) - 1
    sub = (index & (half - 1)) + half
    sub = np.where(bucket < 0, sub - half, sub)
    bucket = np.maximum(bucket, 0)
    lowest = sub << (bucket + unit)
    size = np.left_shift(1, bucket + unit)
    return (lowest + size - 1).astype(float), (lowest + (size >> 1)).astype(float)


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
        """One interval; a tagged one (the drain) keeps its tag (hdrh's reader reads it)."""
        if tag := hist.get_tag():
            self.file.write(f"Tag={tag},")
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
        copy.set_tag(hist.get_tag())
        yield copy


def load_hlog(path: Path) -> HdrHistogram:
    """The whole-step histogram: every interval of the log merged."""
    return merge(read_hlog(path))


Second = tuple[np.ndarray, np.ndarray]  # one second of a step: bin values (ms), their counts


def seconds_of(h: HdrHistogram) -> Second:
    """A per-second histogram as compact arrays, as the analysis keeps each second (a full
    HdrHistogram holds ~200 KB of counts)."""
    values, counts = bins(h)
    return values / 1000, counts


def percentiles_of(second: Second, percentiles: Sequence[float]) -> list[float]:
    """Percentiles (ms) of compact counts, computed as HdrHistogram does; nan when empty."""
    values, counts = second
    if counts.sum() == 0:
        return [float("nan")] * len(percentiles)
    cumulative = counts.cumsum()
    targets = rank(np.asarray(percentiles, dtype=float), cumulative[-1])
    return [float(v) for v in values[np.searchsorted(cumulative, targets)]]
