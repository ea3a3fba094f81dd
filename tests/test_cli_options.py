"""Every option of every `lab` command says what it does and what it is when not given, and each
option name means one thing across commands (lab.cli.common.options.MEANINGS); a retired
spelling still works, hidden, and says the new one.

The walk reads the commands themselves (`lab.cli.main:main`), so an option added tomorrow is
checked without touching this file. Parsing only (`make_context`): no command is run.
"""

from __future__ import annotations

import re

import click
import pytest

from lab.cli.common.options import MEANINGS, Renamed
from lab.cli.main import main

COMMANDS: dict[str, click.Command] = {"lab": main, **main.commands}


def options(hidden: bool) -> list[tuple[str, click.Command, click.Option]]:
    return [
        (name, command, param)
        for name, command in COMMANDS.items()
        for param in command.params
        if isinstance(param, click.Option) and param.hidden == hidden
    ]


VISIBLE = options(hidden=False)
RETIRED = [(n, c, p) for n, c, p in options(hidden=True) if isinstance(p, Renamed)]


def ids(cases: list[tuple[str, click.Command, click.Option]]) -> list[str]:
    return [f"{name}/{param.opts[0]}" for name, _, param in cases]


def help_record(command: click.Command, name: str, param: click.Option) -> tuple[str, str]:
    record = param.get_help_record(click.Context(command, info_name=name))
    assert record is not None
    return record


def long_name(param: click.Option) -> str:
    return next(o for o in param.opts if o.startswith("--"))


@pytest.mark.parametrize(("name", "command", "param"), VISIBLE, ids=ids(VISIBLE))
def test_every_option_has_a_help_line_and_shows_its_default(
    name: str, command: click.Command, param: click.Option
) -> None:
    """A value option says what it is when not given: click's `[default: X]`, or the help's own
    `[default: ...]` where the default comes from elsewhere (the scenario), or `[required...]`."""
    _, text = help_record(command, name, param)
    assert (param.help or "").strip(), f"lab {name} {param.opts[0]}: no help"
    if param.is_flag or param.multiple or param.count:
        return
    assert re.search(r"\[(default: |required)", text), (
        f"lab {name} {param.opts[0]}: the help shows no default: {text!r}"
    )


@pytest.mark.parametrize(("name", "command", "param"), VISIBLE, ids=ids(VISIBLE))
def test_every_option_name_has_one_declared_meaning(
    name: str, command: click.Command, param: click.Option
) -> None:
    """A name used by a command must be declared for that command in MEANINGS, beside its one
    meaning: a second command taking a name means reading what it already means."""
    option = long_name(param)
    assert option in MEANINGS, f"lab {name} {option}: not in lab.cli.common.options.MEANINGS"
    users, meaning = MEANINGS[option]
    assert name in users.split(), (
        f"lab {name} {option}: MEANINGS says {option} is {meaning!r}, in {users} only; "
        "give this command's option another name, or add it there if it means the same"
    )


def test_the_vocabulary_lists_no_name_or_command_that_is_not_used() -> None:
    used = {(name, long_name(param)) for name, _, param in VISIBLE}
    stale = [
        f"{option} in lab {name}"
        for option, (users, _) in MEANINGS.items()
        for name in users.split()
        if (name, option) not in used
    ]
    assert not stale, f"lab.cli.common.options.MEANINGS lists options no command has: {stale}"


def required_args(command: click.Command) -> list[str]:
    """The least a command's parser accepts: a value for each argument and required option."""
    args: list[str] = []
    for param in command.params:
        if not param.required:
            continue
        value = param.type.choices[0] if isinstance(param.type, click.Choice) else "x"
        args += [str(value)] if isinstance(param, click.Argument) else [param.opts[0], str(value)]
    return args


def a_value(param: click.Parameter) -> str:
    if isinstance(param.type, click.Choice):
        return str(param.type.choices[-1])
    return "0.5" if isinstance(param.type, click.types.FloatParamType) else "3"


def target_of(command: click.Command, retired: Renamed) -> click.Parameter:
    (param,) = [p for p in command.params if p.name == retired.target and p.expose_value]
    return param


def test_every_hidden_option_is_a_retired_spelling_that_warns() -> None:
    """No silent alias: a hidden option is a `renamed` one (the `--workers` of `lab ui` once
    took a value without a word)."""
    silent = [
        f"lab {n} {p.opts[0]}" for n, _, p in options(hidden=True) if not isinstance(p, Renamed)
    ]
    assert not silent, f"hidden options that are not lab.cli.common.options.renamed: {silent}"
    assert RETIRED, (
        "the walk found no retired spelling: is lab.cli.common.options.Renamed still used?"
    )


@pytest.mark.parametrize(("name", "command", "retired"), RETIRED, ids=ids(RETIRED))
def test_a_retired_spelling_still_works_and_names_the_new_one(
    name: str, command: click.Command, retired: Renamed, capsys: pytest.CaptureFixture[str]
) -> None:
    new = target_of(command, retired)
    value = a_value(new)
    ctx = command.make_context(name, [*required_args(command), retired.opts[0], value])
    assert ctx.params[retired.target] == new.type_cast_value(ctx, value)
    (line,) = capsys.readouterr().err.splitlines()
    assert line == f"{name}: {retired.opts[0]} is deprecated; use {new.opts[0]}"
    assert long_name(retired) not in MEANINGS or name not in MEANINGS[long_name(retired)][0]


@pytest.mark.parametrize(("name", "command", "retired"), RETIRED, ids=ids(RETIRED))
def test_a_retired_spelling_beside_the_new_one_is_a_usage_error(
    name: str, command: click.Command, retired: Renamed
) -> None:
    new = target_of(command, retired)
    value = a_value(new)
    args = [*required_args(command), new.opts[0], value, retired.opts[0], value]
    with pytest.raises(click.UsageError, match=f"give {new.opts[0]}"):
        command.make_context(name, args)


ALTERNATIVES = [(n, c, p) for n, c, p in VISIBLE if p.metavar and "|" in p.metavar]


@pytest.mark.parametrize(("name", "command", "param"), ALTERNATIVES, ids=ids(ALTERNATIVES))
def test_a_metavar_of_alternatives_includes_the_default(
    name: str, command: click.Command, param: click.Option
) -> None:
    """`--front`'s metavar once left out `bare`, its default."""
    _, text = help_record(command, name, param)
    default = re.search(r"\[default: ([\w,+-]+)\]", text)
    assert default, f"lab {name} {param.opts[0]}: no default in {text!r}"
    assert default.group(1) in str(param.metavar).split("|")
