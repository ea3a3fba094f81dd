"""A run's claims, made once: the one object the terminal summary and `lab report` both render.

The summary and the report used to judge the run each on their own (the report with no front
costs and in another order), so the two could drift. Here one pass goes records -> points
(`Run.points`, `analysis.points`: built once per run, each point with the trials it rests on and
its throughput and p99 as the `Side`s the test compares; the point table prints those very
values) -> claims (the rankings, the lead, the answer, the front's ranking, the crossovers with
their count, each through the one test of difference on those sides, made here once) -> words;
`analysis.summary` and `analysis.report` only lay the words out.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from analysis.ceiling import ceiling_words, remeasured_words
from analysis.differences import crossing_words, crossovers, lead, tied
from analysis.front import front_costs
from analysis.instrument import instrument_lines
from analysis.interfaces import run_answer
from analysis.judge import judge, sentence
from analysis.limiting import model_sentences
from analysis.loading import Run
from lab.verdict.difference import floor


@dataclass(frozen=True)
class Claims:
    """Every claim of one run, in words, in the order both renderings give them."""

    answer: tuple[str, ...]  # for the user's app
    ranking: tuple[str, ...]  # the lead, the per-level sentences, the floor they rest on
    limits: tuple[str, ...]  # what limits each model, and what a front costs
    instrument: tuple[str, ...]  # the load generator itself
    crossings: pd.DataFrame  # `analysis.differences.crossovers`, corrected (BH)
    crossing_count: str  # "1 of 57 flip(s) tested beyond noise, Benjamini-Hochberg-corrected ..."


def claims(run: Run, table: pd.DataFrame) -> Claims:
    """The run's claims from its points and its point table, each judged once."""
    pts = run.points
    rankings = judge(pts)
    ties = tied(table, rankings)
    said = [*lead(table, rankings, pts)]
    said += [sentence(v) for v in rankings if v not in ties]
    if any(v.trials == 1 for v in rankings):
        said.append(floor().words())
    said += [x for x in (remeasured_words(run.manifest),) if x]
    cross = crossovers(table, pts)
    return Claims(
        answer=tuple(run_answer(run.records, run.manifest, pts)),
        ranking=tuple(said),
        limits=(
            *model_sentences(run.records),
            *front_costs(pts),
            *[x for x in (ceiling_words(run.records, run.manifest),) if x],
        ),
        instrument=tuple(instrument_lines(run.records)),
        crossings=cross,
        crossing_count=crossing_words(cross) if not cross.empty else "",
    )
