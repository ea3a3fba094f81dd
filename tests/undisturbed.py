"""Measure again while the lab says this machine, not the model, set a step's verdict.

A test of a model's limit reads the verdict of a real step. On a machine shared with other work
the lab rightly names the host or its own apparatus first (`host_busy`, `apparatus_saturated`,
`lab_limited`), and then the model's limit is only secondary evidence. Such a test neither
returns early nor fails on a neighbour's load: it measures again, a bounded number of times, and
judges the last measurement whatever it says.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")
DISTURBED = frozenset({"host_busy", "apparatus_saturated", "lab_limited"})
ATTEMPTS = 3


def disturbed(step: dict) -> bool:
    """The lab says something besides the model may have moved this step's figures."""
    return bool(DISTURBED & set(step["flags"]))


def undisturbed(measure: Callable[[int], T], step_of: Callable[[T], dict]) -> T:
    """`measure(attempt)` until the step under test is undisturbed, at most `ATTEMPTS` times."""
    result = measure(0)
    for attempt in range(1, ATTEMPTS):
        if not disturbed(step_of(result)):
            break
        result = measure(attempt)
    return result
