"""Reading TOML files and checking their tables, with errors that name the file, key and reason."""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lab.errors import LabError


def load_toml(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise LabError(f"{path}: no such file")
    try:
        return tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:  # its message carries "(at line N, column M)"
        raise LabError(f"{path}: malformed TOML: {e}") from None
    except UnicodeDecodeError:
        raise LabError(f"{path}: not a UTF-8 text file") from None


def check_table(
    table: Any, where: str, types: Mapping[str, type | tuple[type, ...]]
) -> dict[str, Any]:
    """Reject unknown keys and wrongly typed values in one TOML table (`where` names it)."""
    if not isinstance(table, dict):
        raise LabError(f"{where}: expected a table, got {type(table).__name__}")
    for key, value in table.items():
        if key not in types:
            raise LabError(f"{where}: unknown key {key!r} (known: {', '.join(sorted(types))})")
        expected = types[key]
        if isinstance(value, bool) and bool not in _as_tuple(expected):
            raise LabError(f"{where}.{key}: expected {_names(expected)}, got a boolean")
        if not isinstance(value, expected):
            raise LabError(f"{where}.{key}: expected {_names(expected)}, got {type(value).__name__}")
    return table


def positive(value: float, where: str) -> None:
    if value <= 0:
        raise LabError(f"{where}: must be positive, got {value}")


def _as_tuple(t: type | tuple[type, ...]) -> tuple[type, ...]:
    return t if isinstance(t, tuple) else (t,)


def _names(t: type | tuple[type, ...]) -> str:
    return " or ".join(x.__name__ for x in _as_tuple(t))
