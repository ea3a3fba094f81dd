"""Reading the docs as the doc tests do: README.md and docs/*.md line by line (code blocks told
from prose), and `lab ... --help` asked of the installed command's launcher (its subcommands and
options). Shared by tests/test_docs.py, tests/test_docs_prose.py, tests/test_docs_figures.py and
tests/test_docs_readme.py.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LAUNCH = "from concurrency_lab.launch import entry; entry()"

FENCE = re.compile(r"^\s*(```|~~~)\s*([\w-]*)")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
OPTION = re.compile(r"(?<![\w-])(--?[A-Za-z][\w-]*)")


def scan(doc: Path) -> Iterator[tuple[int, str, str | None]]:
    """(line number, text, code block language or None for prose) of every line of a page."""
    language: str | None = None
    for number, line in enumerate(doc.read_text().splitlines(), start=1):
        fence = FENCE.match(line)
        if fence:
            language = None if language is not None else fence.group(2).lower()
        elif language is None:
            yield number, line, None
        else:
            yield number, line, language


@functools.cache
def lab_help(*words: str) -> str:
    """`lab WORDS --help` through the installed command's launcher, from the repository root."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-c", LAUNCH, *words, "--help"]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"lab {' '.join(words)} --help failed:\n{done.stderr}"
    return done.stdout


def subcommands() -> set[str]:
    section = lab_help().split("Commands:", 1)[1]
    return {m.group(1) for m in re.finditer(r"^  (\S+)", section, re.MULTILINE)}


def options_of(*words: str) -> set[str]:
    """Every option name `lab WORDS --help` lists (each line of its options column)."""
    out = set()
    for line in lab_help(*words).splitlines():
        if line.startswith("  -"):
            out.update(OPTION.findall(line.strip().split("  ")[0]))
    return out
