"""Stop every long command at its moments (start-up, the check, a step, serving) with SIGINT,
SIGTERM, SIGHUP or SIGKILL (or as a supervisor does: SIGTERM, then SIGKILL to the group 3 s
later), of the command alone or of its whole process group: nothing of the lab
runs after a short grace, every finished step is intact (and, for `lab run` and `lab advise`,
resumable with every finished step kept), and the exit code is the table's for the signal
(docs/running.md; tests/stopharness.py says how survivors are found).

A bounded set for CI (each case a few seconds); `python -m benchmarks.stop_sweep` draws many random
moments per command and reports how many stops at how many moments held.
"""

from __future__ import annotations

import pytest

from tests.stopharness import CASES, one

# (case, signal, seconds after the start, signal the whole group, then resume): the delays land
# in start-up (before the first child), the check, a step, and serving, on this 2-core machine.
STOPS = [
    ("run", "INT", 0.3, False, False),
    ("run", "TERM", 5.0, False, True),
    ("run", "KILL", 8.0, True, True),
    ("run", "HUP", 7.0, False, False),
    ("run-front", "TERM", 6.0, False, False),
    ("advise", "KILL", 8.0, False, True),
    ("run-app-check", "INT", 2.0, False, False),
    ("run-app-check", "TERM", 3.0, False, False),
    ("reproduce", "INT", 8.0, False, False),
    ("ui", "TERM", 1.5, False, False),
    ("ui", "KILL", 7.0, False, False),
    ("ui", "KILL", 7.0, True, False),
    ("ui", "TERM-KILL", 7.0, False, False),  # a supervisor: SIGTERM, SIGKILL to the group 3 s on
    ("serve", "TERM", 0.8, False, False),
    ("serve", "TERM", 1.5, False, False),
    ("serve", "KILL", 2.5, False, False),
    ("serve-front", "INT", 3.0, False, False),
    ("upstream", "TERM", 2.0, False, False),
    ("generator", "HUP", 3.0, False, False),
    ("compose-serve", "TERM", 2.5, False, False),
    ("compose-upstream", "KILL", 1.5, True, False),
    ("compose-postgres", "TERM", 2.0, False, False),
    ("compose-postgres", "KILL", 4.0, False, False),
    ("compose-redis", "INT", 1.5, False, False),
]


def test_every_long_command_is_covered() -> None:
    assert {case for case, *_ in STOPS} == set(CASES)


@pytest.mark.parametrize(
    ("case", "sig", "delay_s", "group", "resumed"),
    STOPS,
    ids=[f"{c}-{s}-{d}s{'-group' if g else ''}" for c, s, d, g, _ in STOPS],
)
def test_a_stop_leaves_nothing_and_exits_as_the_table_says(
    case: str, sig: str, delay_s: float, group: bool, resumed: bool
) -> None:
    outcome = one(case, sig, delay_s, group, resumed)
    assert not outcome.survivors, outcome
    assert outcome.exit_code in outcome.expected, outcome
    assert not outcome.broken, outcome
    assert all(code == 0 for code in outcome.resumed), outcome
