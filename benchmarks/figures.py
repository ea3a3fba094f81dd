"""A benchmark's table as a docs figure summary (`analysis.docfigures`): its figures, with the run
id, machine, date and command they come from, so docs/benchmarks.md is rendered from them and a
test fails when the page and the summary differ; and the machine's pinned split, said before any
figure."""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from lab.backends.base import CpuLayout
from lab.system import environment


def pinned_split(console: Console, client: str) -> CpuLayout:
    """The machine split in two and pinned, `client` (the load's side) on one half, the target
    on the other, said first with the load average: a busy, shared machine shows in it before
    any figure it would skew."""
    layout = CpuLayout.split(pin=True)
    console.print(
        f"{os.cpu_count()} cores; {client} on {list(layout.client)}, target/server on "
        f"{list(layout.server)}; load average {os.getloadavg()[0]:.1f} (shared machine?)"
    )
    return layout


def write_summary(
    path: Path, name: str, headers: list[str], rows: list[list[str]], kept: str, started: float
) -> None:
    """Write one table (all cells as printed) with where it comes from."""
    env = environment.capture()
    machine = (
        f"{env['cpus']} CPUs ({env['cpu_model']}), Python {platform.python_version()}, "
        f"client on core(s) {list(CpuLayout.split(pin=True).client)}, load average "
        f"{os.getloadavg()[0]:.1f} at the end"
    )
    summary = {
        "run_id": time.strftime(f"%Y%m%d-%H%M%S-{name}", time.localtime(started)),
        "machine": machine,
        "date": time.strftime("%d %B %Y", time.localtime(started)).lstrip("0"),
        "command": f"python benchmarks/{Path(sys.argv[0]).name} " + " ".join(sys.argv[1:]),
        "kept": kept,
        "view": "table",
        "headers": headers,
        "align": ["---", *["---:"] * (len(headers) - 1)],
        "rows": rows,
    }
    path.write_text(json.dumps(summary, indent=1) + "\n")


def print_table(title: str, headers: list[str], rows: list[list[str]]) -> None:
    """A benchmark's table on the terminal, every figure right-aligned."""
    table = Table(title=title, header_style="bold")
    for header in headers:
        table.add_column(header, justify="right")
    for r in rows:
        table.add_row(*r)
    Console().print(table)
