"""A step's sampled stacks as the run directory keeps them (`lab run --profile`).

Collapsed stacks, the flame-graph tools' own format: one line per distinct stack, its frames
root first separated by `;`, then a space and its samples. py-spy writes them (`--format raw`);
each recorder's (`wall`, `busy`: `lab.system.profile`) is gzipped beside the step's histogram as
`<histogram stem>.<kind>.stacks.gz`, and the step's evidence names both files.
"""

from __future__ import annotations

import gzip
from collections import Counter
from pathlib import Path


def stacks_path(dest: Path, kind: str) -> Path:
    """Where a step's stacks of one recorder are kept: `<dest>.<kind>.stacks.gz`."""
    return dest.with_name(f"{dest.name}.{kind}.stacks.gz")


def parse(text: str) -> Counter[str]:
    """Collapsed stacks (`frame;frame;... count` per line) into stack -> samples."""
    out: Counter[str] = Counter()
    for line in text.splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            out[stack] += int(count)
    return out


def read(path: Path) -> Counter[str]:
    """A kept stacks file, read back (empty where it is missing)."""
    if not path.exists():
        return Counter()
    with gzip.open(path, "rt") as f:
        return parse(f.read())
