"""The flag registry is the one list of flags: nothing raised that is not declared, nothing
declared that nothing raises, and the docs' table is the registry's."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from lab.record.flags import FLAGS, markdown_table
from lab.record.step import Raised

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("lab", "loadgen", "analysis", "servers", "experiments")


def _modules() -> dict[str, ast.Module]:
    out = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            out[name] = ast.parse(path.read_text(), str(path))
    return out


def _raised_literals(tree: ast.Module) -> set[str]:
    """First arguments of `Raised("...")` calls that are string literals."""
    found = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "Raised"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            found.add(node.args[0].value)
    return found


def _strings(tree: ast.Module) -> set[str]:
    return {
        n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
    }


MODULES = _modules()


def test_every_raised_flag_is_declared() -> None:
    raised = set().union(*(_raised_literals(t) for t in MODULES.values()))
    assert raised, "no Raised(...) call found: the scan is broken"
    assert raised <= set(FLAGS), f"raised but not declared: {sorted(raised - set(FLAGS))}"


@pytest.mark.parametrize("name", sorted(FLAGS), ids=sorted(FLAGS))
def test_every_declared_flag_is_raised_where_the_registry_says(name: str) -> None:
    flag = FLAGS[name]
    assert flag.raised_by in MODULES, f"{name}: raised_by {flag.raised_by} is not a module"
    tree = MODULES[flag.raised_by]
    assert name in _raised_literals(tree) | _strings(tree), f"{flag.raised_by} never raises {name}"


def test_raising_an_undeclared_flag_fails_at_once() -> None:
    with pytest.raises(Exception, match="not declared"):
        Raised("no_such_flag")


def test_docs_flag_table_is_the_registry() -> None:
    assert markdown_table() in (ROOT / "docs" / "results-and-limits.md").read_text()
