"""Render run directories' `reproduction.json` as Markdown, for docs/reproductions.md
and docs/reproduce-granian.md.

Usage: python -m experiments.markdown results/<run-id> [results/<run-id> ...]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from experiments.common import COLUMNS, fmt


def cell(value: Any) -> str:
    return fmt(value).replace("|", "\\|")


def render(run_dir: Path) -> str:
    table = json.loads((run_dir / "reproduction.json").read_text())
    manifest = json.loads((run_dir / "manifest.json").read_text())
    lines = [
        f"#### `lab reproduce {table['experiment']}`"
        + (f" `--{table['size']}`" if table["size"] != "default" else ""),
        "",
        f"Measured on {table['machine']}, run `{run_dir.name}` "
        f"(load average at start: {manifest['environment'].get('loadavg', '?')}). "
        f"Published: {table['published_source']}.",
        "",
        "| section | metric | unit | published | measured | measured/published | note "
        "| explanation |",
        "|---|---|---|---:|---:|---:|---|---|",
    ]
    for r in table["rows"]:
        lines.append("| " + " | ".join(cell(r.get(k, "")) for k in COLUMNS) + " |")
    lines += [f"**Unexplained gap:** {gap}" for gap in table.get("unexplained_gaps", [])]
    lines += ["", f"**Conclusion (this machine):** {table['conclusion']}", ""]
    return "\n".join(lines)


def main() -> None:
    print("\n".join(render(Path(arg)) for arg in sys.argv[1:]))


if __name__ == "__main__":
    main()
