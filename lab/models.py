"""The model registry: each server model is one declarative entry in a TOML file.

A model is an argv template plus what one unit of its `workers` knob is. Knobs are normalised: the
same defaults for every model, overridable per scenario and per run, and recorded in the manifest.
"""

from __future__ import annotations

import shutil
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

from lab import interpreters
from lab.config import check_name, check_table, in_range, load_toml, positive
from lab.errors import LabError
from lab.resources import child_env, data_file

BUILTIN_MODELS = data_file("servers", "models.toml")
UNITS = ("thread", "greenlet", "coroutine", "process")
APPS = ("wsgi", "asgi")
# What `{app}` in a model's argv names unless the run brings its own app (`lab run --app`).
DEFAULT_TARGETS = {"wsgi": "servers.app_wsgi:app", "asgi": "servers.app_asgi:app"}
INSTALL_HINTS = {
    "uwsgi": "pip install uwsgi (it compiles from source: needs gcc and the Python headers)",
    "gunicorn": "pip install gunicorn",
    "granian": "pip install granian (Rust wheels for CPython 3.9+ on common platforms)",
    "uvicorn": "pip install 'uvicorn[standard]'",
}
KNOB_MAX = {
    "processes": 256,
    "workers": 100_000,
    "backlog": 1_000_000,
    "keepalive_s": 3_600,
    "pool": 100_000,
    "timeout_s": 86_400,
    "db_pool": 100_000,
}


@dataclass(frozen=True)
class Knobs:
    """Server settings shared by every model; "auto" values are resolved per run."""

    processes: int = 1
    workers: int | str = "auto"
    backlog: int = 2048
    keepalive_s: int = 5
    pool: int | str = "auto"
    timeout_s: int = 120
    db_pool: int | str = "auto"  # PostgreSQL/Redis connections per process (each driver's pool)

    def resolve(self, top_level: int) -> Knobs:
        """Fill in "auto": workers = the run's highest level, pool and db_pool = workers."""
        workers = top_level if self.workers == "auto" else self.workers
        pool = workers if self.pool == "auto" else self.pool
        db_pool = workers if self.db_pool == "auto" else self.db_pool
        resolved = replace(self, workers=workers, pool=pool, db_pool=db_pool)
        for f in fields(resolved):
            value = getattr(resolved, f.name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise LabError(f'knob {f.name}: expected a whole number or "auto", got {value!r}')
            positive(value, f"knob {f.name}")
            in_range(value, 1, KNOB_MAX[f.name], f"knob {f.name}")
        return resolved

    def updated(self, overrides: dict[str, Any], where: str) -> Knobs:
        check_table(overrides, where, {f.name: (int, str) for f in fields(self)})
        for key, value in overrides.items():
            if isinstance(value, str) and value != "auto":
                raise LabError(f'{where}.{key}: expected a whole number or "auto", got {value!r}')
        return replace(self, **overrides)


@dataclass(frozen=True)
class Model:
    name: str
    description: str
    app: str  # "wsgi" (the Flask app) or "asgi" (its Quart twin)
    unit: str  # what one `workers` unit is: thread, greenlet, coroutine or process
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()
    baseline: bool = False
    target: str = ""  # "module:attribute" served as {app}; empty: the lab's own app of this kind
    requires: tuple[str, ...] = ()  # distributions the server needs besides the app's
    python: str = ""  # interpreter to run under in a lab-made venv; "" = the lab's own

    def requirements(self) -> tuple[str, ...]:
        """Pinned specs of everything the model imports: its app's packages and its server's."""
        return interpreters.requirements(self.app, self.requires)

    def bindir(self) -> Path:
        """Where the server's programs are: the lab's own environment, or the model's venv."""
        if not self.python:
            return interpreters.own_bindir()
        return interpreters.venv_dir(self.python, self.requirements()) / "bin"

    def capacity(self, knobs: Knobs) -> int:
        """How many requests the model can hold at once with these (resolved) knobs."""
        per_process = 1 if self.unit == "process" else int(knobs.workers)
        return int(knobs.processes) * per_process

    def command(self, knobs: Knobs, host: str, port: int) -> list[str]:
        values = {**asdict(knobs), "bindir": str(self.bindir()), "host": host}
        values["port"] = port
        values["app"] = self.target or DEFAULT_TARGETS[self.app]
        try:
            return [part.format(**values) for part in self.argv]
        except KeyError as e:
            raise LabError(f"model {self.name}: unknown placeholder {e} in argv") from None
        except (IndexError, ValueError, AttributeError) as e:  # "{0}", "{", "{port.x}"
            raise LabError(
                f"model {self.name}: bad placeholder in argv ({e}); use {{name}} with a knob "
                f"name, host, port, bindir or app, and {{{{ for a literal brace"
            ) from None

    def check_installed(self, knobs: Knobs) -> None:
        """Fail before any load if the server program is missing, saying how to install it."""
        program = self.command(knobs, "127.0.0.1", 0)[0]
        if shutil.which(program) is None:
            raise LabError(f"model {self.name}: {program} not found; {install_hint(program)}")


def install_hint(name: str) -> str:
    return INSTALL_HINTS.get(Path(name).name, f"pip install {Path(name).name}")


def parse_knobs(pairs: tuple[str, ...]) -> dict[str, int | str]:
    """`NAME=VALUE` pairs (from `--knob`) into knob overrides: whole numbers, or the word "auto"."""
    overrides: dict[str, int | str] = {}
    for pair in pairs:
        name, sep, value = (part.strip() for part in pair.partition("="))
        if not sep or not name:
            raise LabError(f"--knob {pair!r}: expected NAME=VALUE, e.g. workers=200")
        try:
            overrides[name] = value if value == "auto" else int(value)
        except ValueError:
            raise LabError(
                f'--knob {name}: expected a whole number or "auto", got {value!r}'
            ) from None
    return overrides


MODEL_KEYS: dict[str, type | tuple[type, ...]] = {
    "description": str,
    "app": str,
    "unit": str,
    "argv": list,
    "env": dict,
    "baseline": bool,
    "requires": list,
    "python": str,
}


@dataclass(frozen=True)
class Registry:
    knobs: Knobs
    models: dict[str, Model]

    def pick(self, names: list[str]) -> list[Model]:
        unknown = [n for n in names if n not in self.models]
        if unknown:
            raise LabError(
                f"unknown model {', '.join(unknown)}; known models: {', '.join(self.models)}"
            )
        return [self.models[n] for n in names]


def load_registry(extra: Path | None = None) -> Registry:
    """The built-in registry, extended (or overridden by name) by a user's models file."""
    registry = _parse(BUILTIN_MODELS, Knobs(), {})
    return _parse(extra, registry.knobs, registry.models) if extra else registry


def _parse(path: Path, knobs: Knobs, models: dict[str, Model]) -> Registry:
    data = check_table(load_toml(path), str(path), {"knobs": dict, "models": dict})
    knobs = knobs.updated(data.get("knobs", {}), f"{path}: [knobs]")
    models = dict(models)
    for name, table in data.get("models", {}).items():
        models[name] = _model(name, table, f"{path}: [models.{name}]")
    return Registry(knobs, models)


def _model(name: str, table: Any, where: str) -> Model:
    check_name(name, where)
    check_table(table, where, MODEL_KEYS)
    for key in ("description", "app", "unit", "argv"):
        if key not in table:
            raise LabError(f"{where}: missing key {key!r}")
    if table["app"] not in APPS:
        raise LabError(f"{where}.app: must be one of {', '.join(APPS)}, got {table['app']!r}")
    if table["unit"] not in UNITS:
        raise LabError(f"{where}.unit: must be one of {', '.join(UNITS)}, got {table['unit']!r}")
    argv = table["argv"]
    if not argv or not all(isinstance(a, str) for a in argv):
        raise LabError(f"{where}.argv: must be a non-empty list of strings")
    env = table.get("env", {})
    if not all(isinstance(v, str) for v in env.values()):
        raise LabError(f"{where}.env: values must be strings")
    if not all(k and "=" not in k and "\0" not in k for k in env):
        raise LabError(f"{where}.env: names must be non-empty and contain no '=' or NUL")
    if any("\0" in part for part in [*argv, *env.values()]):
        raise LabError(f"{where}: argv and env values must not contain NUL characters")
    model = Model(
        name=name,
        description=table["description"],
        app=table["app"],
        unit=table["unit"],
        argv=tuple(argv),
        env=tuple(sorted(env.items())),
        baseline=table.get("baseline", False),
        requires=_requires(table.get("requires", []), where),
        python=table.get("python", ""),
    )
    try:  # placeholders are checked now, so the error can name the file
        model.command(Knobs().resolve(1), "127.0.0.1", 0)
    except LabError as e:
        raise LabError(f"{where}.argv: {e}") from None
    return model


def _requires(value: list[Any], where: str) -> tuple[str, ...]:
    if not all(isinstance(v, str) and v.strip() for v in value):
        raise LabError(f'{where}.requires: must be a list of distribution names, e.g. ["granian"]')
    return tuple(value)


def server_env(model: Model, knobs: Knobs, upstream_url: str) -> dict[str, str]:
    """The environment a model's server runs with: the app reads its settings from here."""
    return child_env(
        {
            "LAB_UPSTREAM_URL": upstream_url,
            "LAB_POOL_SIZE": str(knobs.pool),
            "LAB_UPSTREAM_TIMEOUT_S": str(knobs.timeout_s),
            "LAB_DB_POOL": str(knobs.db_pool),
            **dict(model.env),
        }
    )
