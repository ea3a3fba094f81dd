"""Every command and option of `lab`, as Markdown for docs/commands.md, and the other blocks of
the docs that are data in the code: docs/failures-and-stops.md's exit codes (`lab.record.exits`)
and listeners (`lab.system.listeners`).

Read from the click commands themselves (names, arguments, options, defaults, help, and cloup's
option groups where a command has them), so the manual's reference is the CLI's: `python -m
lab.cli.reference` rewrites every block, and tests/test_docs_figures.py fails when the reference
differs from it or when an option `lab X --help` lists is missing from it (tests/
test_exit_codes.py and tests/test_listeners.py, when their table differs: `is_current`).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path

import click

from lab.cli.main import main
from lab.record import exits
from lab.system import listeners

START, END = "<!-- reference: python -m lab.cli.reference -->", "<!-- /reference -->"
DOCS = Path(__file__).resolve().parents[2] / "docs"
COMMANDS = DOCS / "commands.md"  # the reference
FAILURES = DOCS / "failures-and-stops.md"  # the exit codes and the listeners


def _cell(text: str) -> str:
    return re.sub(r"\s+", " ", text).replace("|", "\\|").strip()


def _names(param: click.Parameter) -> str:
    if isinstance(param, click.Argument):
        return f"`{param.human_readable_name}`"
    names = [*param.opts, *param.secondary_opts]
    return ", ".join(f"`{n}`" for n in names)


def _default(param: click.Parameter) -> str:
    if isinstance(param, click.Option) and (param.is_flag or not param.show_default):
        return ""
    value = param.default
    if value is None or callable(value) or value == () or value is False:
        return ""
    return f" [default: {value}]"


def _help(param: click.Parameter) -> str:
    if isinstance(param, click.Argument):
        return "argument"
    return _cell((getattr(param, "help", None) or "") + _default(param))


def _groups(command: click.Command) -> list[tuple[str, list[click.Parameter]]]:
    """The command's parameters under the titles `--help` shows: cloup's option groups, then
    the rest untitled ("" for a plain click command's, all of them)."""
    groups = [(g.title, list(g.options)) for g in getattr(command, "option_groups", [])]
    grouped = {id(p) for _, params in groups for p in params}
    rest = [p for p in command.params if id(p) not in grouped]
    return [*groups, ("", rest)] if rest or not groups else groups


def command_table(name: str, command: click.Command) -> str:
    """One command: its first help line, then a table of its arguments and options."""
    lines = [f"## `{f'lab {name}'.strip()}`"]
    lines += ["", _cell((command.help or "").split("\n\n")[0]), ""]
    lines += ["| option | what it does |", "|---|---|"]
    for title, params in _groups(command):
        if title:
            lines.append(f"| **{_cell(title)}** | |")
        lines += [f"| {_names(p)} | {_help(p)} |" for p in params if not getattr(p, "hidden", 0)]
    if not name:
        lines.append("| `--help`, `-h` | show the help of `lab` or of any command |")
    return "\n".join(lines)


def markdown() -> str:
    """The whole reference: `lab` itself, then every command in the order `lab --help` lists."""
    ctx = click.Context(main)
    parts = [command_table("", main)]
    for name in main.list_commands(ctx):
        command = main.get_command(ctx, name)
        if command is not None and not command.hidden:
            parts.append(command_table(name, command))
    return "\n\n".join(parts)


def refreshed(
    text: str, start: str = START, end: str = END, body: Callable[[], str] = markdown
) -> str:
    """`text` with the block between `start` and `end` replaced by `body()` (by default the
    reference)."""
    head, _, rest = text.partition(start)
    _, _, tail = rest.partition(end)
    return f"{head}{start}\n{body()}\n{end}{tail}"


def is_current(text: str, start: str, end: str, body: Callable[[], str]) -> bool:
    """Whether `text` holds the block between `start` and `end` exactly as `body()` renders it."""
    return f"{start}\n{body()}\n{end}" in text


# Every generated block of the docs: page -> (start marker, end marker, what renders it)
BLOCKS: dict[Path, tuple[tuple[str, str, Callable[[], str]], ...]] = {
    COMMANDS: ((START, END, markdown),),
    FAILURES: (
        (exits.BEGIN, exits.END, exits.markdown),
        (listeners.BEGIN, listeners.END, listeners.markdown),
    ),
}


if __name__ == "__main__":
    if sys.argv[1:]:
        sys.exit("usage: python -m lab.cli.reference (rewrites the docs' generated blocks)")
    for path, blocks in BLOCKS.items():
        page = path.read_text()
        for block in blocks:
            page = refreshed(page, *block)
        path.write_text(page)
