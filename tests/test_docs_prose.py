"""Numbers in the docs' sentences come from somewhere: a committed summary or the code.

Figure blocks are rendered from committed summaries (tests/test_docs_figures.py); a measured
number typed into a sentence is not, and drifts when the lab is re-run ("p50 123 ms" where the
summary now says 105.1). So every number with a unit of measure (ms, s, min, %, MB, req/s, x)
in a sentence of README.md or docs/*.md, outside figure blocks, code and inline code, must be a
value that a committed summary (docs/figures/*.json) holds, or a named constant of the code or
its data files (thresholds included): `NAME = value` in the lab's Python, a value in its TOML
files (scenarios, models, tuning, the sources' published figures). Rounding to the decimals the
sentence shows is allowed, and a fraction said as a percentage (0.1 as 10%).
"""

from __future__ import annotations

import ast
import json
import re
import tomllib
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from tests.docscan import CODE_SPAN, DOCS, ROOT, scan

CODE_FOLDERS = ("lab", "analysis", "loadgen", "servers", "experiments", "benchmarks", "tuning")
UNIT = r"(?:ms|µs|s|sec|seconds|min|minutes|%|MB|GB|KB|kB|req/s|rps|x|cores?)"
NUMBER = re.compile(  # a number or a range, thousands as "11k" too, then a unit
    rf"(?<![\w.,/-])\d[\d,]*(?:\.\d+)?k?(?:\s*-\s*\d[\d,]*(?:\.\d+)?k?)?\s*{UNIT}(?![\w/])"
)
SPAN_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")
THOUSANDS = re.compile(r"(\d[\d,]*(?:\.\d+)?)(k?)")
LINK_TARGET = re.compile(r"\]\([^)]*\)")
COMMENT = re.compile(r"<!--.*?-->")


def sentences(doc: Path) -> Iterator[tuple[int, str]]:
    """(line, text) of each prose line outside figure and reference blocks, tables and code,
    with inline code, link targets and comments taken out."""
    inside = False
    for number, line, language in scan(doc):
        if line.startswith(("<!-- figure:", "<!-- reference:")):
            inside = True
        if line.startswith(("<!-- /figure", "<!-- /reference")):
            inside = False
            continue
        if inside or language is not None or line.lstrip().startswith("|"):
            continue
        text = COMMENT.sub(" ", LINK_TARGET.sub("]", CODE_SPAN.sub(" ", line)))
        yield number, text


def said(doc: Path) -> list[tuple[int, str, float, int]]:
    """(line, what, value, decimals) of every number with a unit in a sentence of `doc`."""
    found = []
    for number, text in sentences(doc):
        for m in NUMBER.finditer(text):
            for part, k in THOUSANDS.findall(m.group(0)):  # both ends of a range
                digits = part.replace(",", "")
                decimals = len(digits.partition(".")[2]) - (3 if k else 0)
                value = abs(float(digits)) * (1000 if k else 1)
                found.append((number, m.group(0).strip(), value, decimals))
    return found


def _numbers(value: Any) -> Iterator[float]:
    """Every number in a JSON or TOML value, numbers written inside its strings included."""
    if isinstance(value, bool):
        return
    if isinstance(value, int | float):
        yield float(value)
    elif isinstance(value, str):
        yield from (abs(float(n.replace(",", ""))) for n in SPAN_NUMBER.findall(value))
    elif isinstance(value, dict):
        for item in value.values():
            yield from _numbers(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _numbers(item)


def _constants(path: Path) -> Iterator[float]:
    """`NAME = number` at a module's top level or in a class body (a frozen set of thresholds),
    tuples of numbers included."""
    tree = ast.parse(path.read_text())
    bodies = [tree.body, *(c.body for c in ast.walk(tree) if isinstance(c, ast.ClassDef))]
    for body in bodies:
        for node in body:
            value = node.value if isinstance(node, ast.Assign | ast.AnnAssign) else None
            if value is None:
                continue
            try:  # a number, or a literal table of them (LIMITS = {"duration_s": 86_400, ...})
                yield from _numbers(ast.literal_eval(value))
            except ValueError:  # arithmetic (60 * 60): its numbers as written
                text = ast.unparse(value)
                if re.fullmatch(r"[\d_.()\s*/+-]+", text):
                    yield from (float(n) for n in SPAN_NUMBER.findall(text.replace("_", "")))


@cache
def sourced() -> frozenset[float]:
    """Every value a sentence may show: the summaries' numbers and the code's constants."""
    values: set[float] = set()
    for summary in (ROOT / "docs" / "figures").glob("*.json"):
        values.update(_numbers(json.loads(summary.read_text())))
    for folder in CODE_FOLDERS:
        for path in (ROOT / folder).rglob("*.py"):
            values.update(_constants(path))
        for path in (ROOT / folder).rglob("*.toml"):
            values.update(_numbers(tomllib.loads(path.read_text())))
    return frozenset(values)


def matches(value: float, decimals: int) -> bool:
    """The value as shown (rounded to its decimals) is a sourced one, or 100 times one."""
    for source in sourced():
        for scaled in (source, source * 100):
            if round(scaled, decimals) == value:
                return True
    return False


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: d.name)
def test_every_number_in_a_sentence_is_a_summarys_or_the_codes(doc: Path) -> None:
    stray = [
        f"{doc.relative_to(ROOT)}:{line}: {what}"
        for line, what, value, decimals in said(doc)
        if not matches(value, decimals)
    ]
    assert not stray, (
        "numbers in sentences that no committed summary (docs/figures/*.json) and no constant of "
        "the code holds; render them from a summary (a figure block) or the code, or take them "
        "out:\n" + "\n".join(stray)
    )


def test_the_prose_check_sees_numbers_and_their_sources() -> None:
    """Guards the scanner: it finds numbers with units, and knows the summaries and constants."""
    found = [what for doc in DOCS for _, what, _, _ in said(doc)]
    assert len(found) >= 50 and any(what.endswith("ms") for what in found)
    assert said(ROOT / "docs" / "running.md")[0][2] > 0
    assert matches(10.0, 0)  # P99-style thresholds of 0.10, shown as 10%
    assert not matches(123456.7, 1)
