"""Invariants of every claim, over generated step records (Hypothesis) run through the claims'
consumers: the one test of difference (`lab.verdict.difference`, `lab compare`'s engine), the
judge, the answer and the crossovers. Flags are drawn from the registry, so a flag added later
(part of no example here) is covered by what the registry says of it."""

from __future__ import annotations

import ast
import math
import random
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from analysis.compare import compare
from analysis.interfaces import answer, bests, claim
from analysis.judge import contender, judge
from analysis.limiting import model_sentences
from analysis.loading import load
from analysis.metrics import crossovers, point_table
from lab.record.flags import FLAGS, excluding, tail_excluding
from lab.record.step import StepRecord
from lab.run.manifest import AS_IS, ASYNC_PORT
from lab.verdict.difference import (
    APART,
    FLAGGED,
    TIE,
    TOO_FEW,
    compare_points,
    differ,
    points,
    side,
)
from tests.fixture_run import FixtureStep, build_run
from tests.test_judge import record

ROOT = Path(__file__).resolve().parent.parent
FLAG_NAMES = sorted(FLAGS)
MODELS = ("a", "b", "c", "d")
CLASSES = {"a": AS_IS, "b": AS_IS, "c": ASYNC_PORT, "d": ASYNC_PORT}
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def point(draw: st.DrawFn, model: str = "a", users: int = 10) -> list[StepRecord]:
    """One point: a model's 1-3 trials at one level, a flag or two on the first."""
    flags = tuple(draw(st.lists(st.sampled_from(FLAG_NAMES), max_size=2, unique=True)))
    rps = st.floats(0.5, 3000.0, allow_nan=False)
    p99 = st.floats(1.0, 5000.0, allow_nan=False)
    n = draw(st.integers(1, 3))
    return [
        record(
            model,
            draw(rps),
            users=users,
            trial=t,
            p99=draw(p99),
            flags=flags if t == 1 else (),
            seconds=tuple(draw(st.lists(rps, min_size=0, max_size=4))),
        )
        for t in range(1, n + 1)
    ]


@st.composite
def sweep(draw: st.DrawFn) -> list[StepRecord]:
    """A sweep: two to four models at one to three levels."""
    models = draw(st.lists(st.sampled_from(MODELS), min_size=2, max_size=4, unique=True))
    levels = draw(st.lists(st.sampled_from((1, 10, 100)), min_size=1, max_size=3, unique=True))
    return [r for m in models for u in levels for r in draw(point(m, u))]


def flags_of(records: list[StepRecord]) -> list[str]:
    return [f for r in records for f in r.flags]


@SETTINGS
@given(sweep())
def test_an_excluded_point_is_never_best_nor_tied(records: list[StepRecord]) -> None:
    by_point = points(records)
    for v in judge(records):
        for model in v.best_rps:
            assert not excluding(flags_of(by_point[(model, v.mode, round(v.level))]))
        for model in v.best_p99:
            rs = by_point[(model, v.mode, round(v.level))]
            assert not tail_excluding(flags_of(rs)) and side(rs, "p99").unfit == ()
        assert not set(v.excluded) & set(v.best_rps + v.best_p99)


@SETTINGS
@given(point("a"), point("b"), st.sampled_from(("rps", "p99")))
def test_a_flagged_point_is_never_apart_nor_tied(
    a: list[StepRecord], b: list[StepRecord], metric: str
) -> None:
    d = differ(side(a, metric), side(b, metric))
    unfit = (tail_excluding if metric == "p99" else excluding)(flags_of(a) + flags_of(b))
    if unfit:
        assert not d.compared and d.word == FLAGGED and not d.apart
    assert d.word in (APART, TIE, FLAGGED, TOO_FEW)
    assert d.apart == differ(side(b, metric), side(a, metric)).apart  # either way round


@SETTINGS
@given(point("a"), st.sampled_from(FLAG_NAMES), st.sampled_from(("rps", "p99")))
def test_adding_a_flag_or_failures_never_makes_a_point_more_comparable(
    a: list[StepRecord], flag: str, metric: str
) -> None:
    other = [record("b", 500.0, p99=50.0)]
    for more in (flag, "errors"):
        first = a[0]
        flags = (*first.flags, more)
        more_flagged = [record("a", first.throughput_rps, p99=first.latency_ms["p99"], flags=flags)]
        before = differ(side(a, metric), side(other, metric))
        after = differ(side(more_flagged + a[1:], metric), side(other, metric))
        assert after.compared <= before.compared
        assert set(side(more_flagged + a[1:], metric).unfit) >= set(side(a, metric).unfit)


@SETTINGS
@given(point("a"), point("b"), st.sampled_from(("rps", "p99")))
def test_a_difference_holds_its_point_and_a_ratio_stays_possible(
    a: list[StepRecord], b: list[StepRecord], metric: str
) -> None:
    d = differ(side(a, metric), side(b, metric))
    if d.compared:
        assert d.lo <= d.diff <= d.hi
        rel, lo, hi = d.relative()
        assert lo >= -1.0 and lo <= rel <= hi


@SETTINGS
@given(sweep())
def test_a_claim_compares_two_points_at_one_level(records: list[StepRecord]) -> None:
    found = claim(records, {"a", "b"}, {"c", "d"})
    if found is None:
        return
    by_point = points(records)
    for c in (found.ref, found.other):
        at = [k for k in by_point if k[0] == c.model and k[2] == round(found.level)]
        assert contender(c.model, by_point[at[0]]) == c
    numbers = set(re.findall(r"(?<!\w)[+-]?\d[\d,]*(?:\.\d+)?", found.words().split(": ", 1)[1]))
    said = {f"{x:+.0%}"[:-1] for d in found.differences for x in d.relative() if not math.isnan(x)}
    assert numbers <= said, (numbers, said)  # every number the comparison states is its own


@SETTINGS
@given(sweep())
def test_judge_and_answer_agree_on_the_winner(records: list[StepRecord]) -> None:
    verdicts = {(v.mode, v.level): v for v in judge([r for r in records if r.model in "ab"])}
    for level, pick in bests(records, {"a", "b"}).items():
        assert verdicts[level].best_rps[0] == pick.best.model
    lines = answer(records, CLASSES, "wsgi")
    top = max(bests(records, {"a", "b"}).items(), default=None)
    if top is not None:
        assert f"at {top[1].label}: {top[1].best.model}," in lines[1]


@SETTINGS
@given(sweep())
def test_a_run_compared_with_itself_changed_nowhere(records: list[StepRecord]) -> None:
    excluded = {
        (m, v.level) for v in judge(records) for m in v.excluded
    }  # what the judge leaves out, compare compares with nothing
    for (model, _, level), rs in points(records).items():
        diffs = compare_points(rs, rs)
        assert not any(d.apart for d in diffs.values())
        assert (diffs["rps"].basis == FLAGGED) == ((model, float(level)) in excluded)


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    st.lists(
        st.tuples(
            st.sampled_from(MODELS),
            st.sampled_from((1, 10)),
            st.floats(50.0, 500.0),
            st.lists(st.sampled_from(FLAG_NAMES), max_size=2, unique=True),
        ),
        min_size=2,
        max_size=6,
        unique_by=lambda x: x[:2],
    )
)
def test_the_summary_table_compare_and_the_judge_agree(
    tmp_path_factory: pytest.TempPathFactory, drawn: list[tuple[str, int, float, list[str]]]
) -> None:
    """On a run directory: the summary's table calls unfair what the judge excludes, the
    crossovers and `lab compare` never call an excluded point apart, and the answer's pick is
    the judge's best."""
    steps = [FixtureStep(m, u, 1, (r,) * 3, (100.0,), flags=tuple(f)) for m, u, r, f in drawn]
    run = load(build_run(tmp_path_factory.mktemp("run"), steps))
    table = point_table(run).set_index(["model", "concurrency"])
    verdicts = judge(run.records)
    for v in verdicts:
        for model in {r.model for r in run.records if r.key.level == v.level}:
            assert bool(table.loc[(model, round(v.level)), "fair"]) == (model not in v.excluded)
    unfair = {(m, c) for (m, c), fair in table["fair"].items() if not fair}
    cross = crossovers(point_table(run), run.records)
    assert not any(
        (r.overtaker, r.concurrency) in unfair for r in cross[cross["clear"]].itertuples()
    )
    same = compare(run, run)
    assert not same["rps_significant"].any() and not same["p99_significant"].any()
    flagged = same.set_index(["model", "concurrency"])["rps_basis"] == FLAGGED
    assert {k for k, f in flagged.items() if f} == unfair
    best = {v.level: v.best_rps[0] for v in verdicts if v.best_rps}
    said = answer(run.records, {m: AS_IS for m in MODELS}, "wsgi")
    if best:
        top = max(best)
        assert f": {best[top]}," in said[1]


@SETTINGS
@given(sweep(), st.randoms(use_true_random=False))
def test_the_claims_do_not_depend_on_record_order(
    records: list[StepRecord], rng: random.Random
) -> None:
    shuffled = list(records)
    rng.shuffle(shuffled)
    assert judge(shuffled) == judge(records)
    assert answer(shuffled, CLASSES, "wsgi") == answer(records, CLASSES, "wsgi")


@SETTINGS
@given(
    sweep(),
    st.lists(st.sampled_from(("none", "server_cpu", "errors", "unknown")), min_size=1),
    st.randoms(use_true_random=False),
)
def test_what_limits_a_model_does_not_depend_on_record_order(
    records: list[StepRecord], limits: list[str], rng: random.Random
) -> None:
    """Trials that name different limits: the sentence names the same one whatever the order."""
    limited = [replace(r, limited_by=limits[i % len(limits)]) for i, r in enumerate(records)]
    shuffled = list(limited)
    rng.shuffle(shuffled)
    assert model_sentences(shuffled) == model_sentences(limited)


HASH_SEED_SCRIPT = """
import json, sys
from analysis.interfaces import answer
from analysis.judge import judge, sentence
from tests.fixture_run import FixtureStep, build_run
from tests.test_judge import record
rows = json.load(sys.stdin)
records = [record(m, r, users=u, trial=t, p99=p, flags=f) for m, r, u, t, p, f in rows]
classes = {"a": "as is", "b": "as is", "c": "async port"}
print([sentence(v) for v in judge(records)], answer(records, classes, "wsgi"))
from lab.advise.advice import Advice, ModelAdvice
from lab.advise.target import Slo
kinds = {"x": "as is", "y": "as is", "z": "bridged", "w": "async port", "v": "async port"}
pss = {"x": 40.5, "y": 40.0, "z": 40.3, "w": 39.0, "v": 39.5}
advised = [ModelAdvice(n, True, {}, "", "", 1, 10.0, pss[n], None, "none", "", "", "", 1, k)
           for n, k in kinds.items()]
print(Advice(Slo(300, 250), tuple(advised), "run", True).to_json())
"""


def test_the_claims_do_not_depend_on_the_hash_seed() -> None:
    rows = [
        [m, rps, u, t, p99, flags]
        for m, rps, p99, flags in (
            ("a", 100.0, 50.0, []),
            ("b", 103.0, 55.0, ["errors"]),
            ("c", 98.0, 45.0, ["client_saturated"]),
        )
        for u in (1, 10)
        for t in (1, 2)
    ]
    said = set()
    for seed in ("0", "1", "12345"):
        out = subprocess.run(
            [sys.executable, "-c", HASH_SEED_SCRIPT],
            input=str(rows).replace("'", '"'),
            capture_output=True,
            text=True,
            cwd=ROOT,
            env={"PYTHONHASHSEED": seed, "PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)},
            timeout=60,
            check=True,
        )
        said.add(out.stdout)
    assert len(said) == 1


JUDGEMENT_MODULES = [
    *sorted((ROOT / "analysis").glob("*.py")),
    ROOT / "lab/verdict/difference.py",
    ROOT / "lab/advise/advice.py",
    ROOT / "lab/advise/target.py",
]


def test_no_threshold_outside_the_threshold_set() -> None:
    """A module-level number in a module that judges is a threshold kept outside
    lab/record/thresholds.py (the t table and unit conversions aside)."""
    found = []
    for path in JUDGEMENT_MODULES:
        for node in ast.parse(path.read_text()).body:
            value = node.value if isinstance(node, ast.Assign | ast.AnnAssign) else None
            number = isinstance(value, ast.Constant) and type(value.value) in (int, float)
            if number:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert found == []
