"""The compiled clients the lab runs beside its own generator (oha, rewrk): where they are,
whether they run here, and their version line.

Here, with the machine, not in an experiment, because two users need them: `lab reproduce
granian-long-io` runs them as the published harnesses did, and every open-loop step runs on oha
where it is installed (chosen by `lab.run.engine`, driven by `loadgen.oha`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

CARGO_BIN = Path.home() / ".cargo" / "bin"


def binary(name: str = "oha") -> str | None:
    """The client on PATH, or where `cargo install` puts it."""
    cargo = CARGO_BIN / name
    return shutil.which(name) or (str(cargo) if os.access(cargo, os.X_OK) else None)


def missing(name: str = "oha") -> str | None:
    """Why the client cannot run here, in one line; None when it can."""
    exe = binary(name)
    if exe is None:
        where = "scripts/setup.sh installs it where cargo is"
        return f"{name} is not installed ({where}: cargo install {name} --locked)"
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"{name} does not run: {e}"
    return None if out.returncode == 0 else f"{name} --version exited {out.returncode}"


def version(name: str = "oha") -> str:
    """The client's version line, or why it cannot run."""
    why = missing(name)
    if why is not None:
        return why
    argv = [str(binary(name)), "--version"]
    return subprocess.run(argv, capture_output=True, text=True, timeout=10).stdout.strip()
