"""Invariants of `lab advise`'s claims over generated open-loop steps (Hypothesis), beside
tests/test_claims_properties.py's for the sweep's: "meets" (a step against a user's target) and
"tied" (the cheapest configurations) come from the one test of difference
(`lab.verdict.difference`), so a flagged step never meets, failures never make a step meet,
advise's ties agree with the judge's, and the advice does not depend on the models' order (nor on
the hash seed: tests/test_claims_properties.py runs it under three)."""

from __future__ import annotations

import random
from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from analysis.judge import judge
from analysis.points import build
from lab.advise.advice import Advice, ModelAdvice
from lab.advise.search import Attempt, Conclusion, Setting, next_move
from lab.advise.target import Slo, p99_meets
from lab.config.models import load_registry
from lab.record.flags import excluding, tail_excluding
from lab.record.models import AS_IS, ASYNC_PORT
from lab.record.step import Raised, Sampled, StepKey, StepRecord, amended, step_record
from lab.verdict.difference import NO_FLOOR, TIE, Side, differ, side
from lab.verdict.sizing import Bounds, Candidate
from tests.fixture_run import window
from tests.helpers import FLAG_NAMES, SETTINGS

THREADS = load_registry().models["uwsgi-threads"]


@st.composite
def open_step(draw: st.DrawFn, model: str = "s") -> StepRecord:
    """An open-loop step of 5 s at a rate: answered share, p99, failures, per-second series and a
    flag or two drawn, as the advisor's confirming step records one."""
    rate = draw(st.sampled_from((300.0, 2000.0, 100.0)))
    rps = rate * draw(st.sampled_from((1.0, 0.995, 0.97, 0.9, 0.6)))
    failed = draw(st.sampled_from((0, 0, 1, 20)))
    flagged = st.lists(st.sampled_from(FLAG_NAMES), min_size=1, max_size=2, unique=True)
    flags = tuple(draw(st.one_of(st.just([]), flagged)))
    p99 = draw(st.floats(50.0, 600.0))
    measured = window(
        rps,
        seconds=5.0,
        errors={"timeout": failed} if failed else None,
        latency_ms={"p50": p99 / 2, "p99": p99, "mean": p99 / 2},
        open_loop={"scheduled": round(rate * 5), "ok_in_window": round(rps * 5)},
        timeseries={"rps": draw(st.lists(st.floats(rps * 0.8, rps * 1.2), max_size=5))},
    )
    raised = tuple(Raised(f, "test") for f in flags)
    return step_record("run", StepKey(model, "open", None, rate, 1), measured, Sampled(), raised)


@st.composite
def stepped(draw: st.DrawFn, model: str = "s") -> tuple[StepRecord, Slo]:
    """A step and a target near its figures (its rate or one a little off; a p99 limit around
    its p99), so that ties, misses and meets all occur."""
    step = draw(open_step(model))
    rate = step.rate_rps or 0.0
    rps = draw(st.sampled_from((rate, rate * 0.95, rate * 1.1, rate * 2)))
    p99 = step.latency.latency_ms["p99"] * draw(st.sampled_from((0.7, 0.9, 1.0, 1.1, 1.3, 1.6)))
    return step, Slo(rps, p99, draw(st.sampled_from((0.0, 0.01))))


def meets(slo: Slo, step: StepRecord) -> bool:
    return not slo.misses(step)


@SETTINGS
@given(stepped())
def test_a_flagged_step_never_meets_a_target(drawn: tuple[StepRecord, Slo]) -> None:
    """A flag that excludes the step, or disowns its tail, and it meets nothing; the search never
    concludes that it meets either."""
    step, slo = drawn
    if tail_excluding(step.evidence.flags):
        assert not meets(slo, step)
        setting = Setting(slo, 10.0, Bounds.of(THREADS, 1))
        move = Attempt(Candidate(1, 45), step.rate_rps or 0.0, "confirm", "test")
        end = next_move(THREADS, setting, [(move, step)])
        assert not (isinstance(end, Conclusion) and end.meets)


@SETTINGS
@given(stepped(), st.integers(1, 50), st.sampled_from(FLAG_NAMES))
def test_failures_or_a_flag_never_make_a_step_meet(
    drawn: tuple[StepRecord, Slo], more: int, flag: str
) -> None:
    step, slo = drawn
    failed = amended(
        step, errors={**step.load.errors, "refused": more}, requests=step.load.requests + more
    )
    flagged = amended(step, flags=(*step.evidence.flags, flag))
    assert meets(slo, failed) <= meets(slo, step)
    assert meets(slo, flagged) <= meets(slo, step)
    loosened = replace(slo, p99_ms=slo.p99_ms * 2, rps=slo.rps / 2)
    assert meets(slo, step) <= meets(loosened, step)  # an easier target is never missed more


@SETTINGS
@given(stepped("s"))
def test_meets_agrees_with_the_judges_tie(drawn: tuple[StepRecord, Slo]) -> None:
    """Advise and the judge use one test: a step the judge sets apart below a step at the
    target's figures misses the target, and a figure advise calls tied with its target the
    judge calls tied with that step (the target has no noise of its own, so advise's interval
    is never wider than the judge's, and it is centred on the same difference)."""
    step, slo = drawn
    ok = round(slo.rps * 5)
    at = amended(
        step,
        model="t",
        throughput_rps=slo.rps,
        ok=ok,
        requests=ok,
        errors={},
        flags=(),
        latency_ms={**step.latency.latency_ms, "p99": slo.p99_ms},
        timeseries={"rps": [slo.rps] * 5},
    )
    (v,) = judge(build([step, at]))
    rps, p99 = (slo.against(step, m) for m in ("rps", "p99"))
    if not excluding(
        step.evidence.flags
    ):  # the judge compares the step's throughput with the target's
        if "s" not in v.best_rps:  # the judge sets it apart below the target's figures
            assert rps.apart and rps.diff < 0
        if rps.apart and rps.diff > 0:  # advise: above the target beyond noise; so is the judge
            assert "t" not in v.best_rps or step.load.throughput_rps <= 0
        if rps.word == TIE:
            assert set(v.best_rps) == {"s", "t"}  # a tie in advise is a tie in the judge
    if side([step], "p99").unfit == () and side([at], "p99").unfit == ():
        if "s" not in v.best_p99:  # the judge sets it apart, above the target's
            assert not p99_meets(p99)
        if p99.word == TIE:
            assert set(v.best_p99) == {"s", "t"}


def configurations(draw: st.DrawFn) -> list[ModelAdvice]:
    names = draw(st.lists(st.sampled_from("abcdef"), min_size=1, max_size=6, unique=True))
    return [
        ModelAdvice(
            n,
            draw(st.booleans()),
            {},
            "",
            "",
            draw(st.integers(1, 2)),
            10.0,
            draw(st.sampled_from((40.0, 40.5, 41.0, 44.0, 60.0))),
            None,
            "none",
            "",
            "",
            "",
            1,
            draw(st.sampled_from((AS_IS, ASYNC_PORT, "bridged"))),
        )
        for n in names
    ]


@SETTINGS
@given(st.data(), st.randoms(use_true_random=False))
def test_the_advice_does_not_depend_on_model_order(data: st.DataObject, rng: random.Random) -> None:
    models = configurations(data.draw)
    shuffled = list(models)
    rng.shuffle(shuffled)
    one, other = (Advice(Slo(300, 250), tuple(ms), "run", True) for ms in (models, shuffled))
    assert one.recommended() == other.recommended() and one.if_ported() == other.if_ported()
    assert one.sentence() == other.sentence()
    picked = one.recommended()
    by_name = {m.model: m for m in models}
    for name in picked:
        m = by_name[name]
        assert m.meets and m.runs_app != ASYNC_PORT  # never a configuration that does not meet
        best = by_name[picked[0]]
        cheaper, other = (Side("pss_mb", x.pss_mb, (x.pss_mb,)) for x in (best, m))
        pss = differ(cheaper, other, NO_FLOOR)
        assert m.cores == best.cores and pss.word == TIE  # the one test's word, the same tie


@SETTINGS
@given(stepped())
def test_the_search_never_blames_waiting_on_a_p99_the_test_calls_within_the_target(
    drawn: tuple[StepRecord, Slo],
) -> None:
    """ "Requests wait before the pool" rests on the p99 missing the target beyond noise, the
    test's own call (`p99_meets`), never on the raw p99 over the limit."""
    step, slo = drawn
    setting = Setting(slo, 10.0, Bounds.of(THREADS, 1))
    move = Attempt(Candidate(1, 45), step.rate_rps or 0.0, "confirm", "test")
    end = next_move(THREADS, setting, [(move, step)])
    if p99_meets(slo.against(step, "p99", flags=False)):
        assert not (isinstance(end, Attempt) and "wait before the pool" in end.why)
