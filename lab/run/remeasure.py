"""Measure again what the lab or the machine kept from a result, instead of excluding it.

A step whose flags name the lab or the machine (`Flag.outside`: the apparatus or a busy host set
the figures, the generator gave no result, the upstream went down) says nothing of the model. On a
laptop where a browser is always running, "measure again on a quiet machine" leaves the work to
the user; so the run does it itself: after the trials, each such step is measured again (a fresh
server, verified, probed and warmed up as in the trials), the models in a shuffled order, within a
budget of the trials' own time (`Scenario.remeasure`, 0.5 by default: about half the run again).
The new record is appended under the same step key: the first stays in steps.jsonl with its
evidence, and `lab.record.rundir.standing` reads the later one instead. A level still disturbed
when the budget is spent is never the answer's level (`analysis.interfaces`), and the summary says
the machine was too busy to tell there.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from lab.record.flags import outside
from lab.record.rundir import standing
from lab.record.step import StepKey, StepRecord

ROUNDS = 2  # a step is measured at most this many times more: a limit that stays is the machine's


@dataclass(frozen=True)
class Owed:
    """One model's steps to measure again in one trial, in level order."""

    model: str
    trial: int
    keys: tuple[StepKey, ...]


def owed_again(records: Sequence[StepRecord]) -> list[Owed]:
    """The standing steps the lab or the machine kept from a result, by model and trial."""
    by: dict[tuple[str, int], list[StepKey]] = {}
    for r in standing(list(records)):
        if outside(r.evidence.flags):
            by.setdefault((r.model, r.trial), []).append(r.key)
    return [
        Owed(model, trial, tuple(sorted(keys, key=lambda k: k.level)))
        for (model, trial), keys in sorted(by.items())
    ]


def in_order(owed: list[Owed], rng: random.Random) -> list[Owed]:
    """The models in a shuffled order (drift on the machine falls on no model in particular)."""
    shuffled = list(owed)
    rng.shuffle(shuffled)
    return shuffled


@dataclass
class Budget:
    """Seconds left for measuring again; a model is started only if its steps fit."""

    seconds: float
    spent: float = 0.0

    def fits(self, estimate_s: float) -> bool:
        return self.spent + estimate_s <= self.seconds

    def spend(self, seconds: float) -> None:
        self.spent += seconds
