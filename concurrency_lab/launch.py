"""The `lab` command: put the lab's code root first on sys.path, then run the CLI.

The code root is `concurrency_lab/lib/` in a wheel, and the checkout itself (the parent of this
folder) in an editable install. Child processes get the same root on PYTHONPATH from
`lab.system.resources.child_env`.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path

STOPS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def code_root() -> Path:
    here = Path(__file__).resolve().parent
    lib = here / "lib"
    root = lib if lib.is_dir() else here.parent
    if not (root / "lab" / "cli" / "main.py").is_file():
        raise SystemExit(f"concurrency-lab is damaged: no lab package in {root}; reinstall it")
    return root


def _stopped(signum: int, _: object) -> None:
    raise SystemExit(128 + signum)


def entry() -> None:
    """The CLI, with a stop while it is still being imported (nothing started yet) exiting
    128 + the signal as the table says, rather than dying of it or with a traceback."""
    previous = {sig: signal.signal(sig, _stopped) for sig in STOPS}
    root = str(code_root())
    if root not in sys.path:
        sys.path.insert(0, root)
    from lab.cli.main import entry as cli_entry

    for sig, handler in previous.items():  # the CLI installs its own (lab.cli.common.stopping)
        signal.signal(sig, handler)
    cli_entry()
