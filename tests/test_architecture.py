"""The shape of the code base, checked from its source: layers, import cycles, function length.

Why: the lab's layers (servers < loadgen < lab core < analysis < entry points) keep the system
under test and the load generator free of the orchestrator, and keep the core free of the CLI;
small functions keep each step of a run readable. These are cheap to break by accident and
expensive to untangle later, so a test reads every import (with `ast`, nothing is executed) and
every function's length.

To place a new module, add its prefix to `LAYERS` (the longest matching prefix wins).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("servers", "loadgen", "lab", "analysis", "experiments", "benchmarks", "concurrency_lab")
MAX_FUNCTION_LINES = 60

# Module prefix -> layer; an import may only go to the same layer or a lower one.
LAYERS: dict[str, int] = {
    "servers": 0,  # the system under test: the apps, the mock upstream, the model registry
    "loadgen": 1,  # the load generator child: locust, histograms, error kinds
    "lab": 2,  # the core: models, scenarios, processes, preflight, sampling, the sweep, results
    "analysis": 3,  # results -> tables, metrics, report, comparisons
    # Entry points: the CLI and the command modules it registers, experiments, benchmarks.
    "lab.cli": 4,
    "lab.options": 4,
    "lab.doctor": 4,
    "lab.serve": 4,
    "lab.meter": 4,  # `python -m lab.meter`: a server's CPU and RSS beside it in its container
    "lab.dbserve": 4,  # `python -m lab.dbserve`: one database in the foreground (Compose)
    "lab.ui": 4,  # `lab ui`: starts servers and the locust UI
    "lab.webui": 4,  # the locust web UI's lab page (a second locustfile)
    "lab.upstream_cmd": 4,
    "analysis.cli": 4,
    "experiments": 4,
    "benchmarks": 4,
    "concurrency_lab": 4,  # the installed `lab` command's launcher
}
LAYER_NAMES = ("servers", "loadgen", "lab core", "analysis", "entry points")

# Known exceptions, each with the reason; a fixed one must leave its list (the tests check).
TEMPORARY_UPWARD: set[tuple[str, str]] = set()
TEMPORARY_CYCLES: set[frozenset[str]] = set()
TEMPORARY_LONG: set[str] = set()


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


def layer_of(module: str) -> int:
    prefixes = [p for p in LAYERS if module == p or module.startswith(p + ".")]
    if not prefixes:
        raise AssertionError(f"{module} has no layer: add its prefix to LAYERS")
    return LAYERS[max(prefixes, key=len)]


def upward_imports() -> list[tuple[str, str]]:
    return sorted(
        (source, target)
        for source, targets in GRAPH.items()
        for target in targets
        if layer_of(target) > layer_of(source)
    )


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


def test_every_module_has_a_layer() -> None:
    for module in GRAPH:
        layer_of(module)


def test_no_import_goes_to_a_higher_layer() -> None:
    found = upward_imports()
    described = [
        f"{s} ({LAYER_NAMES[layer_of(s)]}) imports {t} ({LAYER_NAMES[layer_of(t)]})"
        for s, t in found
        if (s, t) not in TEMPORARY_UPWARD
    ]
    assert not described, "\n".join(described)
    assert set(found) >= TEMPORARY_UPWARD, "fixed: remove it from TEMPORARY_UPWARD"


def test_no_import_cycles() -> None:
    groups = strongly_connected(GRAPH)
    cycles = [" <-> ".join(sorted(g)) for g in groups if g not in TEMPORARY_CYCLES]
    assert not cycles, "import cycles:\n" + "\n".join(cycles)
    assert set(groups) >= TEMPORARY_CYCLES, "fixed: remove it from TEMPORARY_CYCLES"


def test_a_type_only_import_counts(tmp_path: Path) -> None:
    """An import under TYPE_CHECKING is still a dependency (lab.manifest -> lab.sweep was one)."""
    source = tmp_path / "m.py"
    source.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from lab import errors\n"
    )
    assert imports_of(source) == {"lab.errors"}


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
    too_long = [
        f"{relative}:{name} has {lines} lines"
        for name, lines in long_functions(path)
        if f"{relative}:{name}" not in TEMPORARY_LONG
    ]
    assert not too_long, f"longer than {MAX_FUNCTION_LINES} lines: " + "; ".join(too_long)


def test_the_lab_process_never_imports_gevent_or_locust() -> None:
    """locust monkey-patches the whole process with gevent when imported. In the orchestrator that
    turns its threads into greenlets and hands a stop signal to whichever greenlet runs: a
    `kill -INT` was once lost inside the progress display's refresh. Only generator processes
    (and the web UI's locust) may import them."""
    import subprocess
    import sys

    modules = "lab.cli, lab.uisave, loadgen.live, loadgen.fanout"  # the orchestrator, the recorder
    found = "sorted(m for m in ('gevent.monkey', 'locust') if m in sys.modules)"
    code = f"import sys, {modules}; print({found})"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert done.stdout.strip() == "[]", done.stdout + done.stderr
