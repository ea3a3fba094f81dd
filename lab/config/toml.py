"""Reading TOML files and checking their tables, with errors that name the file, key and reason."""

from __future__ import annotations

import math
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lab.record.errors import LabError

MAX_FILE_BYTES = 1_000_000  # scenario and model files are a few kB; anything huge is a mistake
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def load_toml(path: Path) -> dict[str, Any]:
    try:
        if path.is_dir():
            raise LabError(f"{path} is a directory: give a TOML file in it")
        if not path.is_file():
            raise LabError(f"{path}: no such file")
        if path.stat().st_size > MAX_FILE_BYTES:
            raise LabError(f"{path}: larger than {MAX_FILE_BYTES} bytes; not a lab config file")
        return tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:  # its message carries "(at line N, column M)"
        raise LabError(f"{path}: malformed TOML: {e}") from None
    except UnicodeDecodeError:
        raise LabError(f"{path}: not a UTF-8 text file") from None
    except RecursionError:
        raise LabError(f"{path}: malformed TOML: nested too deeply") from None
    except OSError as e:
        raise LabError(f"{path}: cannot read: {e.strerror or e}") from None


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
            raise LabError(
                f"{where}.{key}: expected {_names(expected)}, got {type(value).__name__}"
            )
        if isinstance(value, float) and not math.isfinite(value):
            raise LabError(f"{where}.{key}: must be a finite number, got {value}")
    return table


def positive(value: float, where: str) -> None:
    if not math.isfinite(value):
        raise LabError(f"{where}: must be a finite number, got {value}")
    if value <= 0:
        raise LabError(f"{where}: must be positive, got {value}")


def above_zero(value: float, high: float, where: str) -> None:
    """A positive setting with a ceiling, said as one range: "must be positive" for 0 and
    "between 0 and 100" for 101 contradicted each other about 0."""
    if not math.isfinite(value):
        raise LabError(f"{where}: must be a finite number, got {value}")
    if not 0 < value <= high:
        raise LabError(f"{where}: must be above 0 and at most {_num(high)}, got {value}")


def in_range(value: float, low: float, high: float, where: str) -> None:
    if not low <= value <= high:  # also rejects NaN
        raise LabError(f"{where}: must be between {_num(low)} and {_num(high)}, got {value}")


def _num(value: float) -> str:
    """1000000, not 1e+06: a bound the user reads and types back."""
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def check_name(name: Any, where: str) -> str:
    """Names end up in file paths (histograms, logs, pid files): keep them plain."""
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise LabError(
            f"{where}: name {name!r} must be 1-64 letters, digits, '.', '_' or '-', "
            f"starting with a letter or digit"
        )
    return name


def _as_tuple(t: type | tuple[type, ...]) -> tuple[type, ...]:
    return t if isinstance(t, tuple) else (t,)


def _names(t: type | tuple[type, ...]) -> str:
    return " or ".join(x.__name__ for x in _as_tuple(t))
