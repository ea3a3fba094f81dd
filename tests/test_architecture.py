"""The shape of the code base, checked from its source: layers, import cycles, sizes.

Why: the folders are the layers a newcomer sees first. The record sits at the bottom, the command
line on top, and every import points down, so the system under test and the load generator stay
free of the orchestrator and the record can be read by anything. Small folders, modules and
functions keep each piece readable in one sitting. These are cheap to break by accident and
expensive to untangle later, so a test reads every import (with `ast`, nothing is executed).

A new folder starts as a row of the layout table in docs/architecture.md, which this test reads.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("servers", "loadgen", "lab", "analysis", "experiments", "benchmarks", "concurrency_lab")
MAX_FUNCTION_LINES = 60
MAX_MODULE_LINES = 400
MAX_FOLDER_MODULES = 20

LAYOUT_PAGE = ROOT / "docs" / "architecture.md"
ANYTHING = "anything"  # benchmarks/ and tests/: they may import every folder


def allowed_imports() -> dict[str, set[str] | str]:
    """The layout table of docs/architecture.md: folder -> the folders it may import (the
    backticked names in its last column), or ANYTHING. The page and the test cannot drift."""
    allowed: dict[str, set[str] | str] = {}
    for line in LAYOUT_PAGE.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not cells[0].startswith("`") or not cells[0].endswith("/`"):
            continue
        folder, may = cells[0].strip("`").rstrip("/"), cells[2]
        names = {n.rstrip("/") for n in may.split("`")[1::2]}
        allowed[folder] = ANYTHING if may.startswith(ANYTHING) else names
    return allowed


ALLOWED = allowed_imports()


def module_files() -> dict[str, Path]:
    """Every module of the packages, by dotted name (`lab/__init__.py` is `lab`)."""
    modules: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            modules[name] = path
    return modules


MODULES = module_files()


def resolve(target: str, names: list[str]) -> Iterator[str]:
    """The project modules that `from target import names` (or `import target`) reaches."""
    if target.split(".")[0] not in PACKAGES:
        return
    submodules = [f"{target}.{n}" for n in names if f"{target}.{n}" in MODULES]
    if submodules:
        yield from submodules
    elif target in MODULES:
        yield target


def imports_of(path: Path) -> set[str]:
    """The project modules a file imports, wherever the import stands (TYPE_CHECKING too)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                found.update(resolve(alias.name, []))
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.update(resolve(node.module, [a.name for a in node.names]))
    return found


GRAPH = {name: imports_of(path) - {name} for name, path in MODULES.items()}


def folder_of(module: str) -> str:
    return MODULES[module].parent.relative_to(ROOT).as_posix()


def folder_graph() -> dict[str, set[str]]:
    """Each folder of modules as one node: which other folders its modules import."""
    graph: dict[str, set[str]] = {}
    for source, targets in GRAPH.items():
        edges = graph.setdefault(folder_of(source), set())
        edges.update(folder_of(t) for t in targets if folder_of(t) != folder_of(source))
    return graph


def strongly_connected(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """Tarjan's algorithm: every group of modules that import each other (directly or not)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[frozenset[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(frozenset(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return groups


def long_functions(path: Path) -> Iterator[tuple[str, int]]:
    """(qualified name, lines) of each function or method longer than the limit."""

    def walk(node: ast.AST, prefix: str) -> Iterator[tuple[str, int]]:
        for child in ast.iter_child_nodes(node):
            name = getattr(child, "name", "")
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                # From `def` to the last line: decorators (click options) are declarations.
                lines = (child.end_lineno or child.lineno) - child.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    yield f"{prefix}{name}", lines
            yield from walk(child, f"{prefix}{name}." if name else prefix)

    yield from walk(ast.parse(path.read_text(), str(path)), "")


def test_the_layout_table_is_read() -> None:
    assert {"lab/record", "lab/run", "lab/cli", "servers", "loadgen"} <= set(ALLOWED)


def test_every_folder_has_a_row_in_the_layout_table() -> None:
    missing = sorted(set(folder_graph()) - set(ALLOWED))
    assert not missing, f"add a row for these folders to {LAYOUT_PAGE.name}: {missing}"


def test_every_import_is_allowed_by_the_layout_table() -> None:
    graph = folder_graph()
    refused = [
        f"{source}/ imports {target}/"
        for source, targets in sorted(graph.items())
        if (allowed := ALLOWED.get(source, set())) != ANYTHING
        for target in sorted(targets - set(allowed))
    ]
    assert not refused, f"not allowed by {LAYOUT_PAGE.name}:\n" + "\n".join(refused)


@pytest.mark.parametrize("level", ["modules", "folders"])
def test_no_import_cycles(level: str) -> None:
    graph = GRAPH if level == "modules" else folder_graph()
    cycles = [" <-> ".join(sorted(g)) for g in strongly_connected(graph)]
    assert not cycles, f"import cycles between {level}:\n" + "\n".join(cycles)


def test_no_folder_holds_too_many_modules() -> None:
    counts: dict[str, int] = {}
    for module in MODULES:
        counts[folder_of(module)] = counts.get(folder_of(module), 0) + 1
    crowded = {folder: n for folder, n in counts.items() if n > MAX_FOLDER_MODULES}
    assert not crowded, f"more than {MAX_FOLDER_MODULES} modules: {crowded}"


def test_a_type_only_import_counts(tmp_path: Path) -> None:
    """An import under TYPE_CHECKING is still a dependency (manifest -> sweep was one)."""
    source = tmp_path / "m.py"
    source.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from lab.record import errors\n"
    )
    assert imports_of(source) == {"lab.record.errors"}


def test_cycles_are_found_through_other_modules() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert strongly_connected(graph) == [frozenset({"a", "b", "c"})]


SOURCES = sorted(
    p
    for folder in (*PACKAGES, "tests", "scripts", "docker")
    for p in (ROOT / folder).rglob("*.py")
    if ".venv" not in p.parts
)


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_function_is_longer_than_the_limit(path: Path) -> None:
    relative = path.relative_to(ROOT)
    too_long = [f"{relative}:{name} has {lines} lines" for name, lines in long_functions(path)]
    assert not too_long, f"longer than {MAX_FUNCTION_LINES} lines: " + "; ".join(too_long)


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_module_is_longer_than_the_limit(path: Path) -> None:
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_MODULE_LINES, f"{path.relative_to(ROOT)} has {lines} lines"


def test_the_lab_process_never_imports_gevent_or_locust() -> None:
    """locust monkey-patches the whole process with gevent when imported. In the orchestrator that
    turns its threads into greenlets and hands a stop signal to whichever greenlet runs: a
    `kill -INT` was once lost inside the progress display's refresh. Only generator processes
    (and the web UI's locust) may import them."""
    import subprocess
    import sys

    # the orchestrator and the recorders
    modules = "lab.cli.main, lab.webui.save, loadgen.live, loadgen.fanout"
    found = "sorted(m for m in ('gevent.monkey', 'locust') if m in sys.modules)"
    code = f"import sys, {modules}; print({found})"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert done.stdout.strip() == "[]", done.stdout + done.stderr


def record_path() -> list[tuple[list[str], list[str]]]:
    """docs/architecture.md's table of the path a run's records take to the words: each stage's
    modules and the modules they read (the backticked dotted names of its columns)."""
    page = LAYOUT_PAGE.read_text()
    table = page.split("## The path a run's records take to the words", 1)[1].split("\n## ")[0]
    rows = []
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0].isdigit():
            rows.append((cells[1].split("`")[1::2], cells[3].split("`")[1::2]))
    return rows


def test_the_records_path_on_the_architecture_page_is_the_code() -> None:
    """Every stage's module exists and imports what the page says it reads: a stage moved or a
    new way round it shows here, not in a newcomer's reading."""
    rows = record_path()
    assert len(rows) >= 8, rows
    for stage, reads in rows:
        for module in stage:
            assert module in MODULES, f"{module}: no such module (docs/architecture.md)"
            missing = [r for r in reads if r not in imports_of(MODULES[module])]
            assert not missing, f"{module} does not import {missing} (docs/architecture.md)"
