"""The app's own environment (`lab run --app ... --app-requirements FILE`, or `--app-venv DIR`):
venvs built from the user's pins, so the app runs under its own versions, never the lab's.

Why: a real app pins what it was tested with (Alerta's API server works under Flask 3.0.3 and
fails under the lab's 3.1), while a server model needs packages of its own (gunicorn, gevent, the
bridge's asgiref). So the lab makes, once and cached under LAB_CACHE_DIR beside its `--python`
venvs, a venv of the app's pins alone, where the import check and the setup commands run, and
one per model of the app's pins plus that model's packages at the versions pyproject.toml asks
for. pip installs both sets together, so a pin the model cannot live with is refused before any
server starts and named on both sides (pip's "The conflict is caused by:"), never resolved in
silence for the lab or for the app. `--app-venv` is read through its own pip's freeze: its pins,
its interpreter; it is the import check's environment as it stands, and is never written to.
"""

from __future__ import annotations

import hashlib
import re
import subprocess
from dataclasses import dataclass
from itertools import takewhile
from pathlib import Path

from lab.record.errors import LabError
from lab.system import interpreters

CAUSES = "The conflict is caused by:"
REQUESTED = re.compile(r"^The user requested (?:\(constraint\) )?(.+)$")
DEPENDS = re.compile(r"^(\S+) (\S+) depends on (.+)$")
INCLUDE = re.compile(r"^(?:-r|--requirement|-c|--constraint)[ =]\s*(\S+)")
SHOWN = 3  # the most lines of either side a conflict names
FREEZE_TIMEOUT_S = 120


@dataclass(frozen=True)
class AppPins:
    """The app's pins as the lab read them, and where the app itself runs: what the record
    keeps of the app's environment (the run's manifest, appcheck.json)."""

    given: str  # as typed: "--app-requirements req.txt", "--app-venv .venv"
    pins: str  # the file pip installs (an --app-venv's freeze is written to the cache)
    sha256: str  # of that file and the files it includes (-r, -c)
    python: str  # the interpreter every venv is made from
    venv: str = ""  # the app's own venv: its import check and setup commands run there

    def bindir(self) -> Path:
        return Path(self.venv) / "bin"


def from_requirements(path: Path, python: str) -> AppPins:
    """A requirements, constraints or `pip freeze` file, and the interpreter to build from;
    LabError naming a file that is not there."""
    given = f"--app-requirements {path}"
    if not path.is_file():
        raise LabError(f"{given}: no such file")
    pins = AppPins(given, str(path.resolve()), digest(path.resolve()), python)
    return pins


def from_venv(venv: Path) -> AppPins:
    """An existing venv, read by its own pip's freeze (written to the cache, so it is installed
    like a lock file); LabError when it is no venv or its pip cannot list it."""
    given = f"--app-venv {venv}"
    python = venv / "bin" / "python"
    if not python.is_file():
        raise LabError(f"{given}: no bin/python there (not a venv)")
    argv = [str(python), "-m", "pip", "--disable-pip-version-check", "freeze"]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=FREEZE_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise LabError(f"{given}: cannot list its packages ({e})") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise LabError(f"{given}: cannot list its packages with its pip ({last})")
    sha = hashlib.sha256(done.stdout.encode()).hexdigest()
    frozen = interpreters.cache_root() / f"freeze-{sha[:16]}.txt"
    frozen.parent.mkdir(parents=True, exist_ok=True)
    frozen.write_text(done.stdout)
    return AppPins(given, str(frozen), sha, str(python), str(venv.resolve()))


def digest(path: Path, seen: frozenset[Path] = frozenset()) -> str:
    """The sha256 of a requirements file with every file it includes (`-r`, `-c`, relative to
    it), so an edited include makes a fresh venv too."""
    h = hashlib.sha256(path.read_bytes())
    for line in path.read_text(errors="replace").splitlines():
        match = INCLUDE.match(line.strip())
        included = (path.parent / match.group(1)).resolve() if match else None
        if included is not None and included.is_file() and included not in seen:
            h.update(digest(included, seen | {path}).encode())
    return h.hexdigest()


def app_venv(pins: AppPins) -> AppPins:
    """The pins with the app's own venv: an --app-venv as it is, else one made of the pins
    alone (LabError with pip's last line when they do not install)."""
    if pins.venv:
        return pins
    where = install(pins, (), pins.given)
    return AppPins(pins.given, pins.pins, pins.sha256, pins.python, str(where))


def model_venv(pins: AppPins, model: str, needs: tuple[str, ...]) -> Path:
    """The venv `model` serves the app from: the app's pins and `needs`, the model's own
    packages; LabError naming both sides where pip cannot install them together."""
    return install(pins, needs, f"model {model}")


def install(pins: AppPins, needs: tuple[str, ...], who: str) -> Path:
    """Make (once, cached by the pins' digest and `needs`) the venv; its directory."""
    key = (f"app pins {pins.sha256}", *needs)
    try:  # not quiet: pip says what conflicts only then
        bindir = interpreters.ensure_venv(pins.python, key, ("-r", pins.pins, *needs))
    except interpreters.InstallFailed as e:
        sides = conflict(e.output, needs)
        if sides is None:
            raise
        raise LabError(conflict_words(who, pins.given, *sides)) from None
    return bindir.parent


def conflict(output: str, needs: tuple[str, ...]) -> tuple[list[str], list[str]] | None:
    """pip's ResolutionImpossible as (what the model needs, what the app's pins ask), each line
    of "The conflict is caused by:" on its side: a requirement in `needs`, or one a package of
    `needs` depends on, is the model's; the rest the app's. The versions pip tried of one
    package are one line. None: pip said no such thing."""
    lines = [line.strip() for line in output.splitlines()]
    if CAUSES not in lines:
        return None
    ours = {_spec(n) for n in needs}
    names = {interpreters.dist_name(n) for n in needs}
    found: dict[str, tuple[bool, str, list[str]]] = {}  # key -> the model's?, said, asked by
    for line in takewhile(bool, lines[lines.index(CAUSES) + 1 :]):
        if requested := REQUESTED.match(line):
            spec = requested.group(1)
            found.setdefault(_spec(spec), (_spec(spec) in ours, spec, []))
        elif depends := DEPENDS.match(line):
            package, version, wanted = depends.groups()
            wanted = wanted.split(";")[0].strip()
            name = interpreters.dist_name(package)
            key = f"{name} {interpreters.dist_name(wanted)}"
            found.setdefault(key, (name in names, wanted, []))[2].append(f"{package} {version}")
    said = [(mine, _asked(spec, by)) for mine, spec, by in found.values()]
    return [s for mine, s in said if mine], [s for mine, s in said if not mine]


def _asked(spec: str, by: list[str]) -> str:
    """A requirement and who asked for it: the first version pip tried, and how many more."""
    if not by:
        return spec
    more = f", and the {len(by) - 1} others pip tried" if len(by) > 1 else ""
    return f"{spec} (for {by[0]}{more})"


def conflict_words(who: str, given: str, model: list[str], app: list[str]) -> str:
    """The one line a conflict is refused with: both sides named."""
    if not model:  # the app's pins refuse each other
        return f"{given}: pip cannot install these together: {_listed(app)}"
    return (
        f"{who} needs {_listed(model)}, and {given} asks for {_listed(app) or 'otherwise'}: pip "
        f"cannot install both (loosen that pin, or leave {who.removeprefix('model ')} out of "
        "--models)"
    )


def _listed(said: list[str]) -> str:
    more = f" (and {len(said) - SHOWN} more)" if len(said) > SHOWN else ""
    return ", ".join(said[:SHOWN]) + more


def _spec(text: str) -> str:
    """A requirement as pip prints it, to compare: no spaces, lower case, no markers."""
    return re.sub(r"\s+", "", text.split(";")[0]).lower()
