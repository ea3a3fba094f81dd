"""Can a model run here? Missing packages or an interpreter they do not support skip it, with why.

Why: a registry lists servers that not every machine or interpreter has (Granian ships Rust wheels
only for some platforms; gevent and uWSGI do not support free-threaded CPython). A run should
measure what it can and say plainly what it left out and how to get it, never crash half-way.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from lab.config.models import Knobs, Model, install_hint
from lab.record.errors import LabError
from lab.system import interpreters


def with_python(models: list[Model], python: str | None) -> list[Model]:
    """`--python PATH` for every model of the run (a model's own `python` field otherwise)."""
    return models if not python else [replace(m, python=python) for m in models]


def interpreter_of(model: Model) -> Path:
    """The Python a model's server runs: its venv's (the app's, or --python's), else the lab's."""
    return model.bindir() / "python" if model.python or model.venv else Path(sys.executable)


def skip_reason(model: Model) -> str | None:
    """Why this model cannot run here (None: it can), making its venv first if it needs one."""
    if model.python:
        base = interpreters.probe(model.python)
        refused = _refusal(base, model)
        if refused:
            return refused
        try:
            interpreters.ensure_venv(model.python, model.requirements())
        except LabError as e:
            return f"its packages do not install for Python {base['version']}: {e}"
    names = tuple(interpreters.dist_name(n) for n in model.requires)
    info = interpreters.probe(interpreter_of(model), names)
    refused = _refusal(info, model)
    if refused or not info["missing"]:
        return refused or _program_missing(model)
    hints = "; ".join(install_hint(n) for n in info["missing"])
    return (
        f"{', '.join(info['missing'])} not installed for Python {info['version']} "
        f"({info['executable']}): {hints}, or `lab run --python PATH` to let the lab make a venv"
    )


def _program_missing(model: Model) -> str | None:
    try:
        model.check_installed(Knobs().resolve(1))
    except LabError as e:
        return str(e)
    return None


def _refusal(info: dict[str, object], model: Model) -> str | None:
    blockers = interpreters.free_threading_blockers(info, model.requires)
    if not blockers:
        return None
    return f"refused under free-threaded Python {info['version']}: {'; '.join(blockers)}"


def usable(models: list[Model], say: Callable[[str], None]) -> list[Model]:
    """The models that can run; each skipped one is reported through `say` with its reason."""
    kept = []
    for model in models:
        reason = skip_reason(model)
        if reason is None:
            kept.append(model)
        else:
            say(f"skipping {model.name}: {reason}")
    if not kept:
        raise LabError("no model can run here (see the reasons above)")
    return kept


def describe(models: list[Model]) -> dict[str, dict[str, object]]:
    """Per model, the interpreter it runs under: recorded in the run's manifest."""
    return {m.name: interpreters.interpreter_info(interpreter_of(m)) for m in models}
