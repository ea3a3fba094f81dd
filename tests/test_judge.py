"""The judge on hand-built records: best, ties, exclusions, single trials. No I/O."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from analysis.judge import judge, sentence
from analysis.points import build
from lab.record.step import StepRecord, amended
from tests.helpers import record

ROOT = Path(__file__).resolve().parent.parent


def only(records: list[StepRecord]):
    (ranking,) = judge(build(records))
    return ranking


def test_best_is_the_highest_throughput_and_lowest_p99() -> None:
    v = only([record("a", 200, p99=150), record("b", 150, p99=110)])  # 15+ requests beyond p99
    assert v.best_rps == ("a",) and v.best_p99 == ("b",)


@pytest.mark.parametrize(
    "flag",
    ["serialized", "server_died", "server_hung", "upstream_down", "start_failed", "interrupted"],
    ids=lambda f: f,
)
def test_a_faulted_step_is_never_best(flag: str) -> None:
    v = only([record("fast", 500, p99=50, flags=(flag,)), record("slow", 100, p99=200)])
    assert v.best_rps == ("slow",) and v.best_p99 == ("slow",)
    assert v.excluded == {"fast": (flag,)}
    assert f"excluded: fast ({flag})" in sentence(v)


def test_when_every_model_is_excluded_there_is_no_best() -> None:
    v = only([record("a", 100, flags=("start_failed",))])
    assert v.best_rps == () and "no fair result" in sentence(v)


def test_overlapping_trial_intervals_are_a_tie() -> None:
    recs = [record("a", r, trial=t) for t, r in enumerate((100, 104, 96), 1)]
    recs += [record("b", r, trial=t) for t, r in enumerate((101, 99, 103), 1)]
    v = only(recs)
    assert set(v.best_rps) == {"a", "b"} and v.trials == 3
    assert "tied" in sentence(v) and "single trial" not in sentence(v)


def test_apart_intervals_are_no_tie() -> None:
    recs = [record("a", r, trial=t) for t, r in enumerate((200, 201, 199), 1)]
    recs += [record("b", r, trial=t) for t, r in enumerate((100, 101, 99), 1)]
    assert only(recs).best_rps == ("a",)


def test_single_trial_uses_its_seconds_and_says_so() -> None:
    noisy = (60, 140) * 5  # mean 100, wide per-second spread
    v = only([record("a", 100, seconds=noisy), record("b", 95, seconds=noisy)])
    assert set(v.best_rps) == {"a", "b"} and v.trials == 1
    assert "single trial" in sentence(v)
    # Flat seconds: only the committed run-to-run floor separates them. Its half-width of a
    # difference lies between 1.96 and 2.1 (t at 20+ degrees of freedom) x sd x |a, b|, read
    # here from noise.toml itself, not through the code under test.
    calibration = tomllib.loads((ROOT / "lab/verdict/noise.toml").read_text())
    assert calibration["points"] >= 20
    sd = calibration["rps_sd"]
    apart = 100 * (1 - 4 * sd)  # 400 sd against at most 2.1 * 139 sd: apart
    assert only([record("a", 100), record("b", apart)]).best_rps == ("a",)
    within = 100 * (1 - sd)  # 100 sd against at least 1.96 * 141 sd: a tie
    assert set(only([record("a", 100), record("b", within)]).best_rps) == {"a", "b"}


def test_a_qualifying_flag_is_a_note_not_an_exclusion() -> None:
    v = only([record("a", 100, flags=("client_saturated",)), record("b", 50)])
    assert v.best_rps == ("a",) and not v.excluded
    assert any("load generator" in note for note in v.notes)


def test_levels_and_modes_are_judged_apart() -> None:
    rankings = judge(
        build([record("a", 10, users=1), record("b", 90, users=10), record("a", 80, users=10)])
    )
    assert [(v.level, v.best_rps[0]) for v in rankings] == [(1.0, "a"), (10.0, "b")]


def test_the_sentence_word_for_word() -> None:
    """One level's sentence, whole: the best, the ties in name order, the exclusions and why,
    a single trial said (the mutation run over analysis/judge.py found its words untested)."""
    v = only(
        [
            record("a", 200),
            record("c", 199),
            record("b", 199.5),
            record("x", 90, flags=("start_failed",)),
        ]
    )
    assert sentence(v) == (
        "10 users (closed): best rps a (tied: b, c), best p99 a (tied: b, c); excluded: x "
        "(start_failed); single trial: its intervals include the run-to-run floor of the lab's A/A "
        "runs (docs/statistics.md); --trials 3 measures the spread instead"
    )
    two = [record(m, r, trial=t) for m, r in (("a", 200), ("b", 100)) for t in (1, 2)]
    assert sentence(only(two)) == "10 users (closed): best rps a, best p99 a (tied: b)"


def test_a_p99_with_too_few_requests_beyond_it_is_no_best() -> None:
    v = only([record("a", 2.0), record("b", 1.5)])  # 20 and 15 answers: 0.2 beyond p99 at most
    assert v.best_p99 == () and v.p99_unread == pytest.approx(0.2)
    assert "best p99 none (at most 0.2 requests beyond p99: 10 needed)" in sentence(v)


def test_the_labs_own_limit_is_named_for_the_models_it_held() -> None:
    some = only([record("a", 100, flags=("lab_limited",)), record("b", 90)])
    assert "the lab's own limit at this level for a (its apparatus" in "; ".join(some.notes)
    every = only(
        [record("a", 100, flags=("lab_limited",)), record("b", 90, flags=("lab_limited",))]
    )
    assert every.notes == (
        "the lab's own limit at this level for every model (its apparatus or the machine set the "
        "figures, not the model): not compared",
    )
    two = only([record(m, 100, flags=("lab_limited",)) for m in "abc"][:2] + [record("c", 9)])
    assert "the lab's own limit at this level for a, b (" in two.notes[0]
    assert not any("lab's own limit" in n for n in only([record("a", 100)]).notes)


def test_best_only_as_measured_is_said_of_the_best_alone() -> None:
    unknown = amended(record("a", 100), limited_by="unknown", limit_reason="below the ideal")
    slower = amended(record("b", 50), limited_by="unknown", limit_reason="also below")
    v = only([unknown, slower])
    assert v.notes == ("a is best only as measured: below the ideal",)


def test_errors_are_no_note_and_a_point_with_no_answer_is_never_best() -> None:
    v = only([record("a", 0.0), record("b", 50, flags=("errors",))])
    assert v.best_rps == ("b",) and v.notes == ()
    assert only([record("a", 0.0)]).best_rps == ()


def test_every_exclusion_and_its_flags_are_said() -> None:
    v = only(
        [
            record("x", 90, flags=("start_failed", "interrupted")),
            record("y", 80, flags=("server_died",)),
        ]
    )
    assert sentence(v).startswith(
        "10 users (closed): best rps none (no fair result), best p99 none (no fair result); "
        "excluded: x (start_failed, interrupted); y (server_died)"
    )


def test_a_level_with_a_skipped_model_still_says_its_single_trial() -> None:
    skipped = amended(record("b", 0.0), status="skipped", flags=("preflight_failed",))
    v = only([record("a", 100), skipped])
    assert v.trials == 1 and v.excluded == {"b": ("preflight_failed",)}
    assert "single trial" in sentence(v)
