"""Latency histograms: exact enough percentiles, lossless logs, merging by counts."""

from __future__ import annotations

import random

import pytest

from lab.record import hist


def filled(values_ms):
    h = hist.new_histogram()
    for v in values_ms:
        hist.record_ms(h, v)
    return h


def test_percentiles_of_known_samples():
    summary = hist.summary_ms(filled(range(1, 10_001)))  # 1..10000 ms, uniform
    for key, expected in {"p50": 5000, "p90": 9000, "p99": 9900, "p999": 9990}.items():
        assert summary[key] == pytest.approx(expected, rel=1e-3)  # 3 significant digits
    assert summary["max"] == pytest.approx(10_000, rel=1e-3)
    assert summary["mean"] == pytest.approx(5000.5, rel=1e-3)


def test_sub_millisecond_resolution_is_kept():
    summary = hist.summary_ms(filled([0.25] * 99 + [1.5]))
    assert summary["p50"] == pytest.approx(0.25, abs=0.001)
    assert summary["max"] == pytest.approx(1.5, abs=0.002)


def test_empty_histogram_summary_is_zero():
    assert set(hist.summary_ms(hist.new_histogram()).values()) == {0.0}


def test_merge_adds_counts_not_percentiles():
    fast, slow = filled([10] * 900), filled([1000] * 100)
    merged = hist.summary_ms(hist.merge([fast, slow]))
    assert merged["p50"] == pytest.approx(10, rel=1e-3)
    assert merged["p90"] == pytest.approx(10, rel=1e-3)
    assert merged["p99"] == pytest.approx(1000, rel=1e-3)  # averaging p99s would say 505


def test_hlog_round_trip(tmp_path):
    intervals = [(0.0, 1.0, filled([5, 6, 7])), (1.0, 2.0, filled([100]))]
    path = tmp_path / "step.hlog"
    hist.write_hlog(path, intervals)
    back = list(hist.read_hlog(path))
    assert [h.get_total_count() for h in back] == [3, 1]
    assert [h.get_start_time_stamp() for h in back] == [0.0, 1000.0]
    assert hist.summary_ms(hist.load_hlog(path))["max"] == pytest.approx(100, rel=1e-3)


@pytest.mark.parametrize("seed", [1, 2, 3], ids=lambda s: f"seed{s}")
def test_summary_is_hdrhistograms_own_to_the_microsecond(seed: int) -> None:
    """The counts-array summary (what a generator computes every second) equals hdrh's own
    iterators' percentiles, max and mean, over the lab's whole range."""
    rng = random.Random(seed)
    h = filled([rng.lognormvariate(2, 1.5) for _ in range(rng.randint(1, 3000))] + [90_000.0])
    theirs = {k: h.get_value_at_percentile(p) / 1000 for k, p in hist.PERCENTILES.items()}
    theirs |= {"max": h.get_max_value() / 1000, "mean": round(h.get_mean_value() / 1000, 3)}
    assert hist.summary_ms(h) == theirs
    assert all(type(v) is float for v in hist.summary_ms(h).values())


def test_corrected_recording_counts_a_stall_by_its_length() -> None:
    """A 100 ms stall seen by a 5 ms timer counts as the 20 timers it held up."""
    h = hist.new_histogram()
    hist.record_corrected_ms(h, 100.0, 5.0)
    assert h.get_total_count() == 20
    assert hist.summary_ms(h)["max"] == pytest.approx(100, rel=1e-3)
