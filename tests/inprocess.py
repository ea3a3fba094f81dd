"""The `lab` CLI run in this process, as the console script runs it, for the in-process tier.

Why not `entry` or a subprocess: both are in tests/tiers.py's SPAWNS (most commands start
servers), so a test using them joins the process tier. A usage error is refused before anything
starts, and its wording and exit code come from `lab.cli.common.stopping.standalone` (one line, the
table's code), so the errors are tested here through `standalone` itself, under click's
CliRunner; `lab run`'s sweep is a stub that raises, so an input wrongly accepted fails the test
instead of starting load (and the tier's guard refuses any process all the same).
"""

from __future__ import annotations

from typing import NamedTuple

import pytest
from click.testing import CliRunner

from lab.cli.common.stopping import standalone
from lab.cli.main import main
from lab.cli.measure import run as run_command


class Reached(Exception):
    """The input was accepted: `lab run` reached its (stubbed) sweep."""


class Said(NamedTuple):
    """What a command did: its exit code (-1: it reached the sweep), stdout and stderr."""

    code: int
    out: str
    err: str

    @property
    def lines(self) -> list[str]:
        """The non-blank lines of both streams."""
        return [line for line in (self.out + self.err).splitlines() if line.strip()]


def _stub_sweep(*_: object, **__: object) -> None:
    raise Reached


def lab_here(monkeypatch: pytest.MonkeyPatch, *args: str) -> Said:
    """`lab ARGS` in this process, its sweep stubbed; wide enough that no line wraps."""
    monkeypatch.setattr(run_command, "Sweep", _stub_sweep)
    monkeypatch.setenv("COLUMNS", "400")
    runner = CliRunner()
    with runner.isolation() as streams:
        try:
            standalone(main, list(args))
            code = 0
        except Reached:
            code = -1
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
        out, err = (s.getvalue().decode(errors="replace") for s in streams[:2])
    return Said(code, out, err)


def one_line_error(said: Said, *needles: str, code: int = 2) -> None:
    """A refusal as the docs promise it: `code`, one line, no traceback, naming `needles`."""
    assert said.code == code, said
    assert len(said.lines) == 1, said.lines
    assert "Traceback" not in said.out + said.err
    for needle in needles:
        assert needle in said.lines[0], said.lines[0]
