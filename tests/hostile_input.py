"""What the hostile-input tests share: the CLI in-process with a stubbed sweep, and TOML documents
written from Python values (so a test can say which hostile value goes where).

The sweep is replaced by a stub that raises `Accepted`, so hundreds of inputs take seconds and no
input, however it parses, ever starts load.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from click.testing import CliRunner

from lab.cli import main as cli
from lab.cli.measure import run as run_command

HOSTILE = Path(__file__).resolve().parent / "hostile"  # the corpus of hostile data files
TINY = str(HOSTILE / "tiny.toml")  # a two-level, one-second real sweep
ACCEPTED = "accepted"


class Accepted(Exception):
    """The input was valid: the stubbed sweep was reached (nothing starts)."""


class Outcome(NamedTuple):
    code: int | str  # an exit code, or "accepted" when the (stubbed) sweep was reached
    err: str


def stubbed_lab(monkeypatch: pytest.MonkeyPatch) -> Callable[..., Outcome]:
    """`lab ARGS` run in-process under CliRunner, with the sweep a stub that raises Accepted."""

    class StubSweep:
        def __init__(self, *_: object, **__: object) -> None:
            raise Accepted

    monkeypatch.setattr(run_command, "Sweep", StubSweep)

    def invoke(*args: str) -> Outcome:
        runner = CliRunner()
        with runner.isolation() as streams:
            try:
                cli.entry(list(args))
                code: int | str = 0
            except Accepted:
                code = ACCEPTED
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else 1
            err = streams[1].getvalue().decode(errors="replace")
        return Outcome(code, err)

    return invoke


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return "{" + ", ".join(f"{json.dumps(k)} = {toml_value(v)}" for k, v in value.items()) + "}"


def toml_doc(tables: dict[str, Any]) -> str:
    """A TOML document; a top-level dict value becomes an inline table."""
    return "\n".join(f"{json.dumps(k)} = {toml_value(v)}" for k, v in tables.items()) + "\n"


def models_doc(models: dict[str, dict[str, Any]]) -> str:
    return "\n".join(f"[models.{json.dumps(n)}]\n{toml_doc(t)}" for n, t in models.items())
