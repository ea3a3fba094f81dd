"""Where the lab's own code and data files are, in a checkout and in an installed wheel.

Why one place: the lab's packages (`lab`, `servers`, `loadgen`, `analysis`, `experiments`) live
side by side in one code root, which is the checkout itself, or the private directory
`concurrency_lab/lib/` of an installed wheel (docs/architecture.md, "Installing"). Data files
are read as package resources, and every child process (servers, the upstream, the load
generator, experiment children) is given the code root on its PYTHONPATH by `child_env`.
"""

from __future__ import annotations

import os
from importlib.resources import files
from pathlib import Path

CODE_ROOT = Path(__file__).resolve().parents[2]  # holds lab/, servers/, loadgen/, tuning/
TUNING = CODE_ROOT / "tuning"  # data only (no Python package): found beside the packages


def data_file(package: str, *parts: str) -> Path:
    """A data file shipped inside one of the lab's packages, e.g. ("servers", "models.toml")."""
    return Path(str(files(package).joinpath(*parts)))


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of every child the lab starts: this one, the code root first on the
    Python path (so `python -m loadgen.worker` or uWSGI's `--module servers.app_wsgi:app` import
    the same code), unbuffered output for the logs, then `extra`."""
    path = os.pathsep.join(p for p in (str(CODE_ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, "PYTHONUNBUFFERED": "1", **(extra or {})}
