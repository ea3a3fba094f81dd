"""Invariants of every claim, over generated step records (Hypothesis) run through the claims'
consumers: the one test of difference (`lab.verdict.difference`, `lab compare`'s engine), the
judge, the answer and the crossovers. Flags are drawn from the registry, so a flag added later
(part of no example here) is covered by what the registry says of it."""

from __future__ import annotations

import ast
import math
import random
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from analysis.compare import compare
from analysis.differences import crossovers
from analysis.interfaces import answer, best_of
from analysis.judge import judge
from analysis.limiting import model_sentences
from analysis.loading import load
from analysis.metrics import point_table
from analysis.points import build
from lab.record.models import AS_IS
from lab.record.step import StepRecord, amended
from lab.verdict.difference import (
    FLAGGED,
    TOO_FEW,
    differ,
    side,
)
from tests.fixture_run import FixtureStep, build_run
from tests.helpers import (
    CLASSES,
    FLAG_NAMES,
    MODELS,
    SETTINGS,
    point,
    record,
    ref_best,
    ref_fair,
    ref_mean,
    ref_points,
    ref_tail_fair,
    sweep,
)

ROOT = Path(__file__).resolve().parent.parent

# The sweeps and the reference they are held against (plain arithmetic over trials and the flag
# registry's declarations, never the code under test) are in tests/helpers.py.


def flags_of(records: list[StepRecord]) -> list[str]:
    return [f for r in records for f in r.evidence.flags]


@SETTINGS
@given(sweep())
def test_the_best_is_the_references_and_never_an_excluded_point(
    records: list[StepRecord],
) -> None:
    by_point = ref_points(records)
    for v in judge(build(records)):
        users = round(v.level)
        here = {m for (m, u) in by_point if u == users}
        assert (v.best_rps[0] if v.best_rps else None) == ref_best(records, here, users)
        for model in v.best_rps:
            assert ref_fair(by_point[(model, users)])
            unknown = [r for r in by_point[(model, users)] if r.evidence.limited_by == "unknown"]
            said = f"{model} is best only as measured: below the ideal, trial"
            assert bool(unknown) == any(n.startswith(said) for n in v.notes)
        for model in v.best_p99:
            assert ref_tail_fair(by_point[(model, users)])
        assert set(v.excluded) == {m for m in here if not ref_fair(by_point[(m, users)])}


@SETTINGS
@given(point("a"), point("b"), st.sampled_from(("rps", "p99")))
def test_a_point_is_its_trials_mean_and_a_flagged_one_is_never_compared(
    a: list[StepRecord], b: list[StepRecord], metric: str
) -> None:
    """The side's figure is the mean the reference computes; a point the registry's flags (or,
    for p99, too few requests beyond it) rule out is compared with nothing."""
    sa = side(a, metric)
    assert sa.value == pytest.approx(ref_mean(a, metric), nan_ok=True)
    fair = ref_fair if metric == "rps" else ref_tail_fair
    d = differ(sa, side(b, metric))
    if not (fair(a) and fair(b)):
        assert not d.compared and d.word in (FLAGGED, TOO_FEW) and not d.apart
    elif not math.isnan(sa.value) and not math.isnan(ref_mean(b, metric)):
        assert d.compared


@SETTINGS
@given(point("a"), st.sampled_from(FLAG_NAMES), st.sampled_from(("rps", "p99")))
def test_adding_a_flag_or_failures_never_makes_a_point_more_comparable(
    a: list[StepRecord], flag: str, metric: str
) -> None:
    other = [record("b", 500.0, p99=50.0)]
    before = differ(side(a, metric), side(other, metric))
    trial = random.Random(len(a)).randrange(len(a))  # any trial, not only the first
    flagged = amended(a[trial], flags=(*a[trial].evidence.flags, flag))
    failing = amended(a[trial], ok=a[trial].load.ok // 3)  # failures: fewer answers, same requests
    for worse in (flagged, failing):
        rs = [*a[:trial], worse, *a[trial + 1 :]]
        after = differ(side(rs, metric), side(other, metric))
        assert after.compared <= before.compared
        assert set(side(rs, metric).unfit) >= set(side(a, metric).unfit)


@SETTINGS
@given(sweep())
def test_compare_leaves_out_what_the_reference_calls_unfair(records: list[StepRecord]) -> None:
    for rs in ref_points(records).values():
        assert (differ(side(rs, "rps"), side(rs, "rps")).basis == FLAGGED) == (not ref_fair(rs))


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
    rankings = judge(run.points)
    for v in rankings:
        for model in {r.model for r in run.records if r.key.level == v.level}:
            assert bool(table.loc[(model, round(v.level)), "fair"]) == (model not in v.excluded)
    unfair = {(m, c) for (m, c), fair in table["fair"].items() if not fair}
    cross = crossovers(point_table(run), run.points)
    assert not any(
        (r.overtaker, r.concurrency) in unfair for r in cross[cross["clear"]].itertuples()
    )
    by_point = ref_points(run.records)
    for r in cross[cross["clear"]].itertuples():  # a clear crossover points the reference's way
        win, lose = (
            ref_mean(by_point[(m, r.concurrency)], "rps") for m in (r.overtaker, r.overtaken)
        )
        assert r.metric != "rps" or win > lose
    same = compare(run, run)
    assert not same["rps_significant"].any() and not same["p99_significant"].any()
    # every point's throughput tripled: `lab compare` calls each fair point apart, never an unfair
    tripled = [replace(s, rps_per_second=tuple(3 * x for x in s.rps_per_second)) for s in steps]
    changed = compare(run, load(build_run(tmp_path_factory.mktemp("tripled"), tripled)))
    rows = changed.set_index(["model", "concurrency"])
    assert {k for k, f in (rows["rps_basis"] == FLAGGED).items() if f} == unfair
    assert {k for k, c in rows["rps_significant"].items() if c} == set(table.index) - unfair
    best = {v.level: v.best_rps for v in rankings if v.best_rps}
    pick = best_of(run.points, set(MODELS))
    if pick is not None:  # at the answer's level (tests/test_answer_level.py), the judge's best
        assert pick.best.model in best[pick.level]
        said = answer(run.points, {m: AS_IS for m in MODELS}, "wsgi")
        assert f": {pick.best.model}," in said[1]


@SETTINGS
@given(sweep(), st.randoms(use_true_random=False))
def test_the_claims_do_not_depend_on_record_order(
    records: list[StepRecord], rng: random.Random
) -> None:
    shuffled = list(records)
    rng.shuffle(shuffled)
    assert judge(build(shuffled)) == judge(build(records))
    assert answer(build(shuffled), CLASSES, "wsgi") == answer(build(records), CLASSES, "wsgi")


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
    limited = [amended(r, limited_by=limits[i % len(limits)]) for i, r in enumerate(records)]
    shuffled = list(limited)
    rng.shuffle(shuffled)
    assert model_sentences(shuffled) == model_sentences(limited)


HASH_SEED_SCRIPT = """
import json, sys
from analysis.interfaces import answer
from analysis.judge import judge, sentence
from analysis.points import build
from tests.helpers import record
rows = json.load(sys.stdin)
records = [record(m, r, users=u, trial=t, p99=p, flags=f) for m, r, u, t, p, f in rows]
classes = {"a": "as is", "b": "as is", "c": "async port"}
print([sentence(v) for v in judge(build(records))], answer(build(records), classes, "wsgi"))
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
