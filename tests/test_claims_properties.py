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
from analysis.interfaces import answer, claim
from analysis.judge import judge
from analysis.limiting import model_sentences
from analysis.loading import load
from analysis.metrics import crossovers, point_table
from lab.record.flags import FLAGS
from lab.record.step import StepRecord
from lab.run.manifest import AS_IS, ASYNC_PORT
from lab.verdict.difference import (
    FLAGGED,
    TOO_FEW,
    compare_points,
    differ,
    side,
)
from tests.fixture_run import FixtureStep, build_run
from tests.test_judge import record

ROOT = Path(__file__).resolve().parent.parent
FLAG_NAMES = sorted(FLAGS)
MODELS = ("a", "b", "c", "d")
CLASSES = {"a": AS_IS, "b": AS_IS, "c": ASYNC_PORT, "d": ASYNC_PORT}
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


LIMITS = ("", "none", "server_cpu", "unknown", "apparatus")


@st.composite
def point(draw: st.DrawFn, model: str = "a", users: int = 10) -> list[StepRecord]:
    """One point: a model's 1-4 trials at one level, each with its own flags (any trial may
    carry any), its own `limited_by`, and failures (fewer answers than requests)."""
    rps = st.floats(0.5, 3000.0, allow_nan=False)
    p99 = st.floats(1.0, 5000.0, allow_nan=False)
    n = draw(st.integers(1, 4))
    out = []
    for t in range(1, n + 1):
        flags = tuple(draw(st.lists(st.sampled_from(FLAG_NAMES), max_size=2, unique=True)))
        r = record(
            model,
            draw(rps),
            users=users,
            trial=t,
            p99=draw(p99),
            flags=flags,
            seconds=tuple(draw(st.lists(rps, min_size=0, max_size=4))),
        )
        failed = draw(st.sampled_from((0.0, 0.0, 0.01, 0.5, 0.95)))
        limit = draw(st.sampled_from(LIMITS))
        why = f"below the ideal, trial {t}" if limit == "unknown" else ""
        out.append(
            replace(r, ok=round(r.requests * (1 - failed)), limited_by=limit, limit_reason=why)
        )
    return out


@st.composite
def sweep(draw: st.DrawFn) -> list[StepRecord]:
    """A sweep: two to four models at one to three levels, some points missing (a model not
    measured at a level)."""
    models = draw(st.lists(st.sampled_from(MODELS), min_size=2, max_size=4, unique=True))
    levels = draw(st.lists(st.sampled_from((1, 10, 100)), min_size=1, max_size=3, unique=True))
    missing = draw(st.sets(st.tuples(st.sampled_from(models), st.sampled_from(levels))))
    return [r for m in models for u in levels if (m, u) not in missing for r in draw(point(m, u))]


# The reference: what a point's figures and fairness are, by plain arithmetic over its trials
# and the flag registry's own declarations (never the code under test).


def ref_fair(rs: list[StepRecord]) -> bool:
    return not any(FLAGS[f].excludes for r in rs for f in r.flags if f in FLAGS)


def ref_tail_fair(rs: list[StepRecord]) -> bool:
    """Its p99 may be compared: no flag excludes it or its tail, 10+ requests beyond p99 in
    every trial."""
    flagged = any(FLAGS[f].excludes or FLAGS[f].tail for r in rs for f in r.flags if f in FLAGS)
    return not flagged and all(r.ok >= 1000 for r in rs)


def ref_mean(rs: list[StepRecord], metric: str) -> float:
    if metric == "rps":
        xs = [r.throughput_rps for r in rs]
    else:
        xs = [r.latency_ms["p99"] for r in rs if r.ok > 0]
    return math.fsum(xs) / len(xs) if xs else math.nan


def ref_points(records: list[StepRecord]) -> dict[tuple[str, int], list[StepRecord]]:
    out: dict[tuple[str, int], list[StepRecord]] = {}
    for r in records:
        out.setdefault((r.model, r.users or 0), []).append(r)
    return out


def ref_best(records: list[StepRecord], models: set[str], users: int) -> str | None:
    """The fair model with the highest mean throughput at `users` (by name among equals)."""
    fair = [
        (-ref_mean(rs, "rps"), m)
        for (m, u), rs in ref_points(records).items()
        if u == users and m in models and ref_fair(rs) and ref_mean(rs, "rps") > 0
    ]
    return min(fair)[1] if fair else None


def flags_of(records: list[StepRecord]) -> list[str]:
    return [f for r in records for f in r.flags]


@SETTINGS
@given(sweep())
def test_the_best_is_the_references_and_never_an_excluded_point(
    records: list[StepRecord],
) -> None:
    by_point = ref_points(records)
    for v in judge(records):
        users = round(v.level)
        here = {m for (m, u) in by_point if u == users}
        assert (v.best_rps[0] if v.best_rps else None) == ref_best(records, here, users)
        for model in v.best_rps:
            assert ref_fair(by_point[(model, users)])
            unknown = [r for r in by_point[(model, users)] if r.limited_by == "unknown"]
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
    flagged = replace(a[trial], flags=(*a[trial].flags, flag))
    failing = replace(a[trial], ok=a[trial].ok // 3)  # failures: fewer answers, same requests
    for worse in (flagged, failing):
        rs = [*a[:trial], worse, *a[trial + 1 :]]
        after = differ(side(rs, metric), side(other, metric))
        assert after.compared <= before.compared
        assert set(side(rs, metric).unfit) >= set(side(a, metric).unfit)


@SETTINGS
@given(sweep())
def test_a_claim_compares_two_points_at_the_reference_level(records: list[StepRecord]) -> None:
    """The answer's claim sits at the heaviest level where both groups have a fair best, with
    the references' figures; no such level, no claim."""
    levels = {u for (_, u) in ref_points(records)}
    both = [
        u for u in levels if ref_best(records, {"a", "b"}, u) and ref_best(records, {"c", "d"}, u)
    ]
    found = claim(records, {"a", "b"}, {"c", "d"})
    if not both:
        assert found is None
        return
    assert found is not None and round(found.level) == max(both)
    by_point = ref_points(records)
    for c, group in ((found.ref, {"a", "b"}), (found.other, {"c", "d"})):
        assert c.model == ref_best(records, group, max(both))
        assert c.rps == pytest.approx(ref_mean(by_point[(c.model, max(both))], "rps"))
    numbers = set(re.findall(r"(?<!\w)[+-]?\d[\d,]*(?:\.\d+)?", found.words().split(": ", 1)[1]))
    said = {f"{x:+.0%}"[:-1] for d in found.differences for x in d.relative() if not math.isnan(x)}
    assert numbers <= said, (numbers, said)  # every number the comparison states is its own


@SETTINGS
@given(sweep())
def test_the_answer_names_the_reference_best(records: list[StepRecord]) -> None:
    levels = sorted({u for (_, u) in ref_points(records)}, reverse=True)
    top = next((u for u in levels if ref_best(records, {"a", "b"}, u)), None)
    lines = answer(records, CLASSES, "wsgi")
    if not records:
        assert lines == []
    elif top is None:
        assert "has a fair result" in lines[1]
    elif "picked on p99: tied on throughput with " in lines[1]:  # the reference best, tied
        assert (
            f"picked on p99: tied on throughput with {ref_best(records, {'a', 'b'}, top)},"
            in lines[1]
        )
    else:
        assert f": {ref_best(records, {'a', 'b'}, top)}," in lines[1]
        assert f" {top} user" in lines[1]


@SETTINGS
@given(sweep())
def test_compare_leaves_out_what_the_reference_calls_unfair(records: list[StepRecord]) -> None:
    for rs in ref_points(records).values():
        diffs = compare_points(rs, rs)
        assert (diffs["rps"].basis == FLAGGED) == (not ref_fair(rs))


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
    by_point = ref_points(run.records)
    for r in cross[cross["clear"]].itertuples():  # a clear crossover points the reference's way
        win, lose = (
            ref_mean(by_point[(m, r.concurrency)], "rps") for m in (r.overtaker, r.overtaken)
        )
        assert r.metric != "rps" or win > lose
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
