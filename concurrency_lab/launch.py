"""The `lab` command: put the lab's code root first on sys.path, then run the CLI.

The code root is `concurrency_lab/lib/` in a wheel, and the checkout itself (the parent of this
folder) in an editable install. Child processes get the same root on PYTHONPATH from
`lab.system.resources.child_env`.
"""

from __future__ import annotations

import sys
from pathlib import Path


def code_root() -> Path:
    here = Path(__file__).resolve().parent
    lib = here / "lib"
    root = lib if lib.is_dir() else here.parent
    if not (root / "lab" / "cli" / "main.py").is_file():
        raise SystemExit(f"concurrency-lab is damaged: no lab package in {root}; reinstall it")
    return root


def entry() -> None:
    root = str(code_root())
    if root not in sys.path:
        sys.path.insert(0, root)
    from lab.cli.main import entry as cli_entry

    cli_entry()
