"""The docs keep working: README.md and docs/*.md are checked against the tree they describe.

- every relative link points at a file that exists, and every `#anchor` at a heading of that file
  (GitHub's slugs);
- every `lab ...` command shown (in a shell code block, or as inline code in the text) names a
  real subcommand and only options that subcommand accepts, asked of `lab SUBCOMMAND --help`
  itself through the installed command's launcher;
- every script (`scripts/X.sh`, `docker/X.sh`) and `python -m MODULE` shown exists;
- the tables generated from registries are the registries' (the flags table: tests/test_flags.py).
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import re
import shlex
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.docscan import CODE_SPAN, DOCS, ROOT, lab_help, options_of, scan, subcommands

RESULTS_PAGE = ROOT / "docs" / "results-and-limits.md"
README_MAX_LINES = 150  # the front door, not the manual: the rest lives in docs/
SHELL_BLOCKS = {"sh", "bash", "shell", "console"}
SEPARATORS = {"&&", "||", ";", "|"}

HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
SCRIPT = re.compile(r"(\./)?[\w./-]+\.sh")


@dataclass(frozen=True)
class Shown:
    """One thing the docs show: where it stands, and its text."""

    doc: Path
    line: int
    text: str

    @property
    def where(self) -> str:
        return f"{self.doc.relative_to(ROOT)}:{self.line}"


def prose(doc: Path) -> Iterator[tuple[int, str]]:
    return ((n, text) for n, text, language in scan(doc) if language is None)


def links() -> list[Shown]:
    found = []
    for doc in DOCS:
        for number, line in prose(doc):
            bare = CODE_SPAN.sub("code", line)
            found += [Shown(doc, number, target) for target in LINK.findall(bare)]
    return [s for s in found if not re.match(r"^[a-z][a-z0-9+.-]*:", s.text)]  # http:, mailto:


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: its text, lower case, punctuation dropped, spaces -> '-'."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"[`*]", "", text).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


@functools.cache
def anchors(doc: Path) -> frozenset[str]:
    seen: dict[str, int] = {}
    out = set()
    for _, line in prose(doc):
        match = HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        out.add(f"{base}-{seen[base]}" if base in seen else base)
        seen[base] = seen.get(base, 0) + 1
    return frozenset(out)


def commands() -> list[Shown]:
    """Every shell command shown: the lines of shell code blocks (continuations joined) and the
    inline code in the text that starts like one (`lab ...`, `bash ...`, `python -m ...`) or
    names a script (`docker/build-image.sh`)."""
    found: list[Shown] = []
    for doc in DOCS:
        pending = ""
        for number, line, language in scan(doc):
            if language is None:
                for span in CODE_SPAN.findall(line):
                    if re.match(r"(lab|bash|python3?) \S", span[1]) or SCRIPT.fullmatch(span[1]):
                        found.append(Shown(doc, number, span[1]))
            elif language in SHELL_BLOCKS:
                pending += line.rstrip("\\").rstrip() + " " if line.endswith("\\") else line
                if not line.endswith("\\"):
                    found.append(Shown(doc, number, pending.strip()))
                    pending = ""
    return [s for s in found if s.text and not s.text.startswith("#")]


def simple_commands(shown: Shown) -> list[list[str]]:
    """The words of each simple command on a line (split at &&, ||, ; and |; comments dropped)."""
    words = shlex.split(shown.text, comments=True)
    out: list[list[str]] = [[]]
    for word in words:
        if word in SEPARATORS:
            out.append([])
        else:
            out[-1].append(word.rstrip(";"))
    return [c for c in out if c]


def lab_invocations(shown: Shown) -> list[list[str]]:
    """The arguments of each `lab` (or `.venv/bin/lab`) invocation on a line."""
    out = []
    for words in simple_commands(shown):
        for i, word in enumerate(words[:-1]):
            if word == "lab" or word.endswith("/lab"):
                out.append(words[i + 1 :])
                break
    return out


def shown_with(pick: Callable[[Shown], list[list[str]]]) -> list[tuple[Shown, list[str]]]:
    return [(shown, words) for shown in commands() for words in pick(shown)]


def ids(cases: list[tuple[Shown, list[str]]]) -> list[str]:
    return [f"{shown.where} {' '.join(words)[:60]}" for shown, words in cases]


LAB_CASES = shown_with(lab_invocations)


def choices_of(sub: str) -> set[str] | None:
    """The values of the subcommand's first argument when its usage lists them ({a|b|c})."""
    usage = lab_help(sub).split("\n\n", 1)[0]
    match = re.search(r"\{([^}]*)\}", usage)
    return set(re.sub(r"\s+", "", match.group(1)).split("|")) if match else None


def options_in(words: list[str]) -> list[str]:
    return [w.strip("[]").split("=")[0] for w in words if w.strip("[]").startswith("-")]


@pytest.mark.parametrize("shown", links(), ids=lambda s: f"{s.where} {s.text}")
def test_relative_link_resolves(shown: Shown) -> None:
    path, _, anchor = shown.text.partition("#")
    target = (shown.doc.parent / path).resolve() if path else shown.doc
    assert target.exists(), f"{shown.where}: {path} does not exist"
    assert ROOT in target.parents or target == ROOT, f"{shown.where}: {path} leaves the repository"
    if anchor:
        assert target.suffix == ".md", f"{shown.where}: an anchor into {path}, not a page"
        assert anchor in anchors(target), f"{shown.where}: no heading #{anchor} in {target.name}"


@pytest.mark.parametrize(("shown", "words"), LAB_CASES, ids=ids(LAB_CASES))
def test_lab_command_names_a_real_subcommand_and_its_options(
    shown: Shown, words: list[str]
) -> None:
    sub, *args = words
    if sub.startswith("-"):  # `lab --version`: the group's own options
        sub, args = "", words
    else:
        assert sub in subcommands(), f"{shown.where}: `lab {sub}` is no subcommand"
    accepted = options_of(sub) if sub else options_of()
    unknown = [o for o in options_in(args) if o not in accepted]
    assert not unknown, f"{shown.where}: `lab {sub}` accepts no {', '.join(unknown)}"
    choices = choices_of(sub) if sub else None
    first = args[0] if args else ""
    if choices and first and not first.startswith("-") and not first.isupper():
        assert first in choices, f"{shown.where}: `lab {sub} {first}`: not one of {choices}"


def scripts_named(shown: Shown) -> list[list[str]]:
    return [[word] for words in simple_commands(shown) for word in words if SCRIPT.fullmatch(word)]


def modules_run(shown: Shown) -> list[list[str]]:
    return [
        [words[i + 1]]
        for words in simple_commands(shown)
        for i, word in enumerate(words[:-1])
        if word == "-m" and i > 0 and Path(words[i - 1]).name.startswith("python")
    ]


SCRIPT_CASES = shown_with(scripts_named)
MODULE_CASES = shown_with(modules_run)


@pytest.mark.parametrize(("shown", "words"), SCRIPT_CASES, ids=ids(SCRIPT_CASES))
def test_script_shown_exists(shown: Shown, words: list[str]) -> None:
    assert (ROOT / words[0]).is_file(), f"{shown.where}: {words[0]} does not exist"


def module_exists(name: str) -> bool:
    parts = name.split(".")
    if not (ROOT / parts[0]).is_dir():  # a third-party module (`python -m pytest`)
        return importlib.util.find_spec(parts[0]) is not None
    base = ROOT.joinpath(*parts)
    return base.with_suffix(".py").is_file() or (base / "__main__.py").is_file()


@pytest.mark.parametrize(("shown", "words"), MODULE_CASES, ids=ids(MODULE_CASES))
def test_module_shown_exists(shown: Shown, words: list[str]) -> None:
    name = words[0]
    assert module_exists(name), f"{shown.where}: python -m {name}: no such module"


def test_the_checks_found_what_the_docs_show() -> None:
    """Guards the scanners themselves: a regex that stops matching would pass every check."""
    assert len(links()) >= 20
    assert {words[0] for _, words in LAB_CASES} >= {"run", "report", "compare", "reproduce", "ui"}
    assert {words[0] for _, words in SCRIPT_CASES} >= {"scripts/quickstart.sh", "scripts/test.sh"}
    assert MODULE_CASES


def test_readme_links_every_docs_page_and_stays_short() -> None:
    readme = ROOT / "README.md"
    linked = {(ROOT / s.text.partition("#")[0]).resolve() for s in links() if s.doc == readme}
    missing = [p.name for p in DOCS[1:] if p.resolve() not in linked]
    assert not missing, f"README.md links no {missing}"
    lines = len(readme.read_text().splitlines())
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; move detail into docs/"


def test_limits_table_is_the_registry() -> None:
    """The limits table in the results page is `markdown_table()` of the limits registry."""
    from lab.verdict.limits import markdown_table

    assert markdown_table() in RESULTS_PAGE.read_text()


def test_rules_table_is_the_rule_table() -> None:
    """The verdict's rules in the results page, in precedence order with the live thresholds."""
    from lab.verdict.limits import rules_table

    assert rules_table() in RESULTS_PAGE.read_text()


def plan_blocks() -> list[tuple[Path, int, str, list[str]]]:
    """Every `$ lab plan ...` shown in a code block: its page, line, command and output."""
    found: list[tuple[Path, int, str, list[str]]] = []
    for doc in DOCS:
        block: list[str] | None = None
        for number, line, language in scan(doc):
            text = line.strip()
            if language is not None and text.startswith("$ lab plan "):
                block = []
                found.append((doc, number, text.removeprefix("$ lab "), block))
            elif language is not None and block is not None and not text.startswith("$"):
                block.extend([text] if text and not text.startswith("```") else [])
            else:
                block = None
    return found


@pytest.mark.parametrize(
    "shown", plan_blocks(), ids=[f"{d.name}:{n}" for d, n, _, _ in plan_blocks()]
)
def test_lab_plan_output_shown_is_what_it_says(shown: tuple[Path, int, str, list[str]]) -> None:
    """The README once said "3 interleaved trials before trusting a difference under about
    10%" while `lab plan --detect 10%` said 4 trials for throughput and no length for p99: what
    a page shows `lab plan` saying is what it says, from the committed floor."""
    doc, number, command, said = shown
    from tests.helpers import lab_cli

    done = subprocess.run(lab_cli(*shlex.split(command)), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert said == done.stdout.strip().splitlines(), f"{doc.name}:{number}: run `lab {command}`"


def test_what_the_readme_says_of_lab_plan_is_what_it_says(monkeypatch) -> None:
    """README.md, docs/results-and-limits.md and docs/worked-examples.md say, without its
    figures, what `lab plan --detect 10%` says from the committed floor: more trials than the
    quick scenario's for a 10% throughput change, and no run length for a 10% p99 change (they
    once said "3 interleaved trials" or "--trials 3" were enough)."""
    from lab.config.scenario import load_scenario
    from tests.inprocess import lab_here

    said = lab_here(monkeypatch, "plan", "--detect", "10%")
    assert said.code == 0, said.err
    rps, p99 = said.out.strip().splitlines()
    trials = re.search(r"--trials (\d+)", rps)
    assert trials and int(trials.group(1)) > load_scenario("quick").trials, rps
    assert "not seen" in p99, p99
    for page in (ROOT / "README.md", RESULTS_PAGE):
        text = " ".join(page.read_text().split())
        assert "`lab plan --detect 10%`" in text and "3 interleaved trials) before" not in text
    examples = " ".join((ROOT / "docs" / "worked-examples.md").read_text().split())
    assert "`--trials 3` before trusting" not in examples and "`lab plan --detect`" in examples


def test_every_option_a_rule_advises_exists() -> None:
    """A rule's advice that names an option (`--no-pin`) names one some `lab` command has: the
    `cpu_taken` rule once advised `--server-cores`, which no command had."""
    import click

    from lab.cli.main import main
    from lab.verdict.table import RULES

    def options(command: click.Command) -> set[str]:
        found = {o for p in command.params for o in p.opts if o.startswith("--")}
        for sub in getattr(command, "commands", {}).values():
            found |= options(sub)
        return found

    known = options(main)
    named = {o for rule in RULES for o in re.findall(r"--[a-z][a-z-]*", rule.advice)}
    assert named, "no rule names an option: the test reads nothing"
    assert named <= known, sorted(named - known)


def test_knob_table_is_the_registry() -> None:
    """The knob table in the running page is `markdown_table()` of the built-in knobs: a knob
    added, renamed or given a new default fails here until the page says so."""
    from lab.config.knobdoc import markdown_table
    from lab.config.models import load_registry

    assert markdown_table(load_registry().knobs) in (ROOT / "docs" / "running.md").read_text()
