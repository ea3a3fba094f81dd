"""The model registry: each server model is one declarative entry in a TOML file.

A model is an argv template plus what one unit of its `concurrency` knob is. Knobs are normalised:
the same defaults for every model, overridable per scenario and per run, and recorded in the
manifest. One word per meaning: `processes` are server processes (what gunicorn, uvicorn and
Granian call `--workers`), `concurrency` is what one process serves at once (threads, greenlets or
coroutines). The old name `workers` is still read, with a note, because a gunicorn user typing
`workers=4` means four processes and would otherwise silently get one process of four greenlets.
"""

from __future__ import annotations

import shutil
import string
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

from lab.config import appenv
from lab.config.toml import check_name, check_table, in_range, load_toml, positive
from lab.record.errors import LabError
from lab.record.models import runs_app
from lab.system import interpreters, procs
from lab.system.resources import child_env, data_file

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
# Old knob names still read: old name -> (new name, what the old one means elsewhere).
KNOB_ALIASES = {
    "workers": (
        "concurrency",
        "gunicorn's, uvicorn's and Granian's --workers are server processes: the knob processes",
    ),
}
KNOB_MAX = {
    "processes": 256,
    "concurrency": 100_000,
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
    concurrency: int | str = "auto"  # threads, greenlets or coroutines per process
    backlog: int = 2048
    keepalive_s: int = 5
    pool: int | str = "auto"
    timeout_s: int = 120
    db_pool: int | str = "auto"  # PostgreSQL/Redis connections per process (each driver's pool)

    def resolve(self, top_level: int) -> Knobs:
        """Fill in "auto": concurrency = the run's highest level, pool and db_pool = concurrency."""
        per = top_level if self.concurrency == "auto" else self.concurrency
        pool = per if self.pool == "auto" else self.pool
        db_pool = per if self.db_pool == "auto" else self.db_pool
        resolved = replace(self, concurrency=per, pool=pool, db_pool=db_pool)
        for f in fields(resolved):
            value = getattr(resolved, f.name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise LabError(f'knob {f.name}: expected a whole number or "auto", got {value!r}')
            positive(value, f"knob {f.name}")
            in_range(value, 1, KNOB_MAX[f.name], f"knob {f.name}")
        return resolved

    def updated(self, overrides: dict[str, Any], where: str) -> Knobs:
        overrides = canonical_knobs(overrides, where)
        check_table(overrides, where, {f.name: (int, str) for f in fields(self)})
        for key, value in overrides.items():
            if isinstance(value, str) and value != "auto":
                raise LabError(f'{where}.{key}: expected a whole number or "auto", got {value!r}')
        return replace(self, **overrides)


@dataclass(frozen=True)
class KnobLimit:
    """What one model's server can take for one knob, declared in its `[models.X.knobs]` table.

    A value below `min` is raised to it (and reported), because the server cannot run with less
    but more is harmless: uWSGI's gevent engine needs at least 2 async cores. A value above `max`
    is refused before anything starts: lowering it would silently cap the model's capacity.
    """

    knob: str
    min: int | None = None
    max: int | None = None
    why: str = ""


@dataclass(frozen=True)
class Model:
    name: str
    description: str
    app: str  # "wsgi" (the Flask app) or "asgi" (its Quart twin)
    unit: str  # what one `concurrency` unit is: thread, greenlet, coroutine or process
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()
    baseline: bool = False
    target: str = ""  # "module:attribute" served as {app}; empty: the lab's own app of this kind
    requires: tuple[str, ...] = ()  # distributions the server needs besides the app's
    python: str = ""  # interpreter to run under in a lab-made venv; "" = the lab's own
    venv: str = ""  # the app's own environment it serves from (lab.system.appvenv); "" = none
    bridge: str = ""  # how an ASGI server reaches a WSGI app ("" = it serves its app natively)
    front: str = ""  # "nginx": served behind it (lab/front); "" = bare, clients reach the server
    cwd: str = ""  # where the server runs: a user's app's directory; "" = the lab's code root
    limits: tuple[KnobLimit, ...] = ()

    def runs_app(self) -> str:
        """`runs_app()` of this model: a model fitted to a user's app (`target`) serves an app of
        its own interface; otherwise the app is the lab's Flask app."""
        kind = self.app if self.target and not self.bridge else "wsgi"
        return runs_app(self.app, self.bridge, kind)

    def requirements(self) -> tuple[str, ...]:
        """Pinned specs of everything the model imports: its app's packages and its server's."""
        return interpreters.requirements(self.app, self.requires)

    def bindir(self) -> Path:
        """Where the server's programs are: the app's venv, the lab's, or the model's own."""
        if self.venv or not self.python:
            return Path(self.venv) / "bin" if self.venv else interpreters.own_bindir()
        return interpreters.venv_dir(self.python, self.requirements()) / "bin"

    def knobs_for(self, knobs: Knobs) -> Knobs:
        """The (resolved) knobs this model runs with: raised to its minimums, checked against
        its maximums (LabError naming the model, knob, value and why)."""
        changes: dict[str, int] = {}
        for limit in self.limits:
            value = int(getattr(knobs, limit.knob))
            if limit.max is not None and value > limit.max:
                raise LabError(
                    f"model {self.name}: knob {limit.knob}={value} is above its maximum "
                    f"{limit.max} ({limit.why or 'the server refuses more'}); lower it with "
                    f"--knob {limit.knob}=N or leave the model out"
                )
            if limit.min is not None and value < limit.min:
                changes[limit.knob] = limit.min
        return replace(knobs, **changes) if changes else knobs

    def adjustments(self, knobs: Knobs) -> list[str]:
        """One line per knob raised to this model's minimum, for the user and the log."""
        used = self.knobs_for(knobs)
        return [
            f"{self.name}: {lim.knob}={getattr(knobs, lim.knob)} raised to "
            f"{getattr(used, lim.knob)} ({lim.why or 'the server needs at least that'})"
            for lim in self.limits
            if getattr(used, lim.knob) != getattr(knobs, lim.knob)
        ]

    def capacity(self, knobs: Knobs) -> int:
        """How many requests the model can hold at once with these (resolved) knobs."""
        used = self.knobs_for(knobs)
        per_process = 1 if self.unit == "process" else int(used.concurrency)
        return int(used.processes) * per_process

    def command(self, knobs: Knobs, host: str, port: int) -> list[str]:
        bare = host.strip("[]")
        used = asdict(self.knobs_for(knobs))
        values: dict[str, object] = {
            **used,
            **{old: used[new] for old, (new, _) in KNOB_ALIASES.items()},  # models files of old
            "bindir": str(self.bindir()),
            "host": bare,
            "port": port,
            "bind": procs.bind_address(bare, port),
            "app": self.target or DEFAULT_TARGETS[self.app],
        }
        return [render(part, values, self.name) for part in self.argv]

    def check_installed(self, knobs: Knobs) -> None:
        """Fail before any load if the server program is missing or cannot be executed."""
        program = self.command(knobs, "127.0.0.1", 0)[0]
        found = shutil.which(program)
        if found is None:
            raise LabError(f"model {self.name}: {program} not found; {install_hint(program)}")
        problem = procs.not_executable(Path(found))
        if problem:
            raise LabError(f"model {self.name}: {found} {problem}")


def install_hint(name: str) -> str:
    return INSTALL_HINTS.get(Path(name).name, f"pip install {Path(name).name}")


def render(template: str, values: dict[str, object], model: str) -> str:
    """One argv element with its placeholders filled; only plain `{name}` fields are allowed,
    so `{port[0]}`, `{host.x}`, `{0}` or `{port!r}` are refused with the names that work."""
    hint = f"use {{name}} with one of {', '.join(sorted(values))}, and {{{{ for a literal brace"
    try:
        parsed = [
            (f, spec or conv)
            for _, f, spec, conv in string.Formatter().parse(template)
            if f is not None
        ]
    except ValueError as e:  # "{", "}"
        raise LabError(f"model {model}: bad placeholder in {template!r} ({e}); {hint}") from None
    for field, extra in parsed:
        if field.isidentifier() and field not in values:
            raise LabError(f"model {model}: unknown placeholder {{{field}}} in argv; {hint}")
        if field not in values or extra:
            raise LabError(f"model {model}: bad placeholder {{{field}...}} in argv; {hint}")
    return template.format(**values)


def knob_notes(models: list[Model], knobs: Knobs) -> list[str]:
    """What each model changes in these resolved knobs (LabError if one cannot take them)."""
    return [note for model in models for note in model.adjustments(knobs)]


def canonical_knobs(overrides: dict[str, Any], where: str) -> dict[str, Any]:
    """Knob overrides under their current names (`workers` read as `concurrency`); LabError
    when a knob is given under both names."""
    out = dict(overrides)
    for old, (new, _) in KNOB_ALIASES.items():
        if old in out:
            if new in out:
                raise LabError(f"{where}: {old} and {new} are the same knob; give {new} only")
            out[new] = out.pop(old)
    return out


def alias_notes(overrides: dict[str, Any]) -> list[str]:
    """One line per knob given under its old name: what it is now, and what the old name means
    to the servers, so a gunicorn user's `workers=4` is never silently four greenlets."""
    return [
        f"knob {old} is now {new} (threads, greenlets or coroutines per process); {elsewhere}: "
        f"running {new}={overrides[old]}"
        for old, (new, elsewhere) in KNOB_ALIASES.items()
        if old in overrides
    ]


def parse_knobs(pairs: tuple[str, ...]) -> dict[str, int | str]:
    """`NAME=VALUE` pairs (from `--knob`) into knob overrides: whole numbers, or the word "auto"."""
    overrides: dict[str, int | str] = {}
    for pair in pairs:
        name, sep, value = (part.strip() for part in pair.partition("="))
        if not sep or not name:
            raise LabError(f"--knob {pair!r}: expected NAME=VALUE, e.g. concurrency=200")
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
    "knobs": dict,  # per-model constraints: knob = { min = N, max = N, why = "..." }
    "bridge": str,  # the WSGI-to-ASGI bridge an asyncio server serves the Flask app through
}
MAX_ARGV_BYTES = 100_000  # real models use < 1 kB; the kernel's limit per argument is 128 kB


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
    found = {n: _model(n, t, f"{path}: [models.{n}]") for n, t in data.get("models", {}).items()}
    return Registry(knobs, {**models, **found})


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
    argv, env = _argv_env(table, where)
    model = Model(
        name=name,
        description=table["description"],
        app=table["app"],
        unit=table["unit"],
        argv=tuple(argv),
        env=tuple(sorted(env.items())),
        baseline=table.get("baseline", False),
        limits=tuple(_limit(k, v, f"{where}.knobs.{k}") for k, v in table.get("knobs", {}).items()),
        requires=_requires(table.get("requires", []), where),
        python=table.get("python", ""),
        bridge=table.get("bridge", ""),
    )
    try:  # placeholders are checked now, so the error can name the file
        model.command(Knobs().resolve(1), "127.0.0.1", 0)
    except LabError as e:
        raise LabError(f"{where}.argv: {e}") from None
    return model


def _argv_env(table: dict[str, Any], where: str) -> tuple[list[str], dict[str, str]]:
    """argv and env, checked: strings only, no NUL, and small enough for execve (E2BIG)."""
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
    size = sum(len(part.encode()) + 1 for part in [*argv, *env, *env.values()])
    if size > MAX_ARGV_BYTES:
        raise LabError(
            f"{where}: argv and env take {size} bytes, more than the {MAX_ARGV_BYTES} a model "
            f"may use (the kernel refuses long argument lists: E2BIG)"
        )
    return argv, env


def _limit(knob: str, table: Any, where: str) -> KnobLimit:
    """One `[models.X.knobs]` entry: `concurrency = { min = 2, why = "..." }`."""
    knob = KNOB_ALIASES[knob][0] if knob in KNOB_ALIASES else knob
    if knob not in KNOB_MAX:
        raise LabError(f"{where}: unknown knob {knob!r} (knobs: {', '.join(KNOB_MAX)})")
    check_table(table, where, {"min": int, "max": int, "why": str})
    low, high = table.get("min"), table.get("max")
    for bound in (b for b in (low, high) if b is not None):
        in_range(bound, 1, KNOB_MAX[knob], where)
    if low is not None and high is not None and low > high:
        raise LabError(f"{where}: min {low} is above max {high}")
    return KnobLimit(knob, low, high, table.get("why", ""))


def _requires(value: list[Any], where: str) -> tuple[str, ...]:
    if not all(isinstance(v, str) and v.strip() for v in value):
        raise LabError(f'{where}.requires: must be a list of distribution names, e.g. ["granian"]')
    return tuple(value)


def server_env(model: Model, knobs: Knobs, upstream_url: str) -> dict[str, str]:
    """The environment a model's server runs with: the app reads its settings from here (a
    user's `--env` too, its placeholders resolved as the server starts: lab.config.appenv)."""
    return child_env(
        {
            "LAB_UPSTREAM_URL": upstream_url,
            "LAB_POOL_SIZE": str(knobs.pool),
            "LAB_UPSTREAM_TIMEOUT_S": str(knobs.timeout_s),
            "LAB_DB_POOL": str(knobs.db_pool),
            **appenv.resolved(model.env, upstream_url),
        }
    )
