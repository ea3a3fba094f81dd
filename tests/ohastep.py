"""One step on oha against a server on loopback, for tests/test_oha_engine.py (open loop) and
tests/test_oha_closed.py (closed loop): the mark that skips, with the reason, where oha is not
installed, a calm server to aim at, and the step with its `.hlog` intervals.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lab.run.generator import run_step
from lab.system import tools
from loadgen.protocol import Done, Start
from tests.fakeservers import shedder

OHA_MISSING = tools.missing("oha")
needs_oha = pytest.mark.skipif(OHA_MISSING is not None, reason=f"{OHA_MISSING}")


@pytest.fixture()
def calm() -> Iterator[str]:
    """A server with room for every request: each answered "ok" after 2 ms."""
    yield from shedder(limit=10_000, delay_ms=2)


def oha_step(
    url: str, tmp_path: Path, settle_s: float = 0.3, timeout_s: float = 5.0, **kw: Any
) -> tuple[Done, list[tuple[float, float, int]]]:
    """One open-loop step on oha (a 2 s window); its `.hlog` intervals (start, end, count; end
    negative: the drain's)."""
    given = {"rate_rps": 200.0, "max_outstanding": 50, "engine_path": tools.binary() or "", **kw}
    start = Start(url, "/", settle_s, 2.0, timeout_s, engine="oha", **given)
    seen: list[tuple[float, float, int]] = []

    def keep(a: float, b: float, h: Any) -> None:
        seen.append((a, -b if h.get_tag() else b, h.get_total_count()))

    return run_step(start, tmp_path / "oha-gen.log", on_histogram=keep), seen
