"""The one sizing `lab advise` searches with and the answer states (lab.verdict.sizing):
invariants over generated figures."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from lab.config.models import KNOB_MAX
from lab.verdict.sizing import HEADROOM, PLAN_UTIL, Bounds, for_rate, to_run

UNITS = st.sampled_from(["thread", "greenlet", "coroutine", "process"])


@settings(max_examples=300, deadline=None)
@given(
    UNITS,
    st.floats(0.1, 50_000),
    st.floats(0.1, 5_000),
    st.floats(0.001, 50),
    st.integers(1, 128),
)
def test_a_configuration_holds_littles_law_within_the_cores(
    unit: str, rate: float, latency_ms: float, cost_ms: float, cores: int
) -> None:
    b = Bounds.within(unit, (), cores)
    sized = for_rate(unit, b, rate, latency_ms, cost_ms)
    c = sized.candidate
    need = math.ceil(rate * latency_ms / 1000 * HEADROOM)
    assert c.holds() >= min(need, b.most) and c.holds() >= 1
    assert math.isclose(sized.cores, rate * cost_ms / 1000)
    if unit == "process":
        assert c.workers == 1 and c.processes <= KNOB_MAX["processes"]
    else:
        assert 1 <= c.processes <= cores
        cpu = math.ceil(sized.cores / PLAN_UTIL)
        assert c.processes >= min(cpu, cores)


def test_a_recorded_model_is_sized_within_its_registry_limits() -> None:
    """uwsgi-gevent's registry raises its least pool: a recorded run of it is sized within it."""
    sized = to_run("uwsgi-gevent", "greenlet", 1.0, 1.0, 0.1, 2)
    assert sized.candidate.workers >= 2
