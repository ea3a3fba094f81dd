"""The two tiers of the suite: in-process tests, and those that start processes (marker `procs`).

A newcomer's first answer comes from the in-process tier (`scripts/test-fast.sh`, which runs
`pytest -m "not procs"` on every core): claims, verdict, points, parsing, docs and architecture,
in a few minutes. Its promise is that it starts no process, so the marker is never left to a
test's author to remember:

- `mark_process_tests` marks `procs` every test whose code, fixtures or parameters reach, through
  any function or class defined under tests/, a name that starts a process (`SPAWNS`);
- `guard_runtest` and `report_spawned` fail any unmarked test that starts a process anyway
  (through production code the names above do not reach, say), naming the command and where the
  test handed over to it, so a miss shows in the fast tier at once instead of slowing it down
  unnoticed. It runs in every run, the whole suite's too.
"""

from __future__ import annotations

import _posixsubprocess
import inspect
import os
import subprocess
import sys
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from types import CodeType, FunctionType
from typing import Any

import pytest

MARK = "procs"
TESTS = Path(__file__).resolve().parent
# Names whose use starts a process: the standard library's ways, the lab's CLI and run helpers
# (tests/helpers.py), the lab's own parts that start servers, the upstream or a generator, and
# Playwright (its driver is a node process).
SPAWNS = frozenset(
    {
        "subprocess",
        "Popen",
        "multiprocessing",
        "create_subprocess_exec",
        "create_subprocess_shell",
        "lab_cli",
        "NativeBackend",
        "DockerBackend",
        "start_upstream",
        "start_server",
        "entry",  # the lab's CLI in-process: most commands start servers or a generator
        "reproduce",
        "run_step",
        "running",  # the databases, as a context
        "Generator",
        "inspect_app",
        "sync_playwright",  # Playwright's driver (node) and the browser it launches
    }
)


def _own(obj: object) -> bool:
    """Defined in the test suite (a file under tests/), so worth reading through."""
    module = sys.modules.get(getattr(obj, "__module__", None) or "")
    return Path(getattr(module, "__file__", None) or "/").resolve().is_relative_to(TESTS)


def _codes(code: CodeType) -> Iterator[CodeType]:
    """A code object and those nested in it (inner functions, lambdas, comprehensions)."""
    yield code
    for const in code.co_consts:
        if isinstance(const, CodeType):
            yield from _codes(const)


def _function(obj: object) -> FunctionType | None:
    """The plain function under fixture, hypothesis and functools wrappers."""
    for attr in ("__pytest_wrapped__", "hypothesis"):
        inner = getattr(obj, attr, None)
        obj = getattr(inner, "obj", getattr(inner, "inner_test", obj)) if inner else obj
    obj = inspect.unwrap(obj) if callable(obj) else obj  # type: ignore[arg-type]
    return obj if isinstance(obj, FunctionType) else None


def spawns(obj: object, seen: set[int] | None = None) -> bool:
    """Whether `obj` (a function, class or value) can reach a name in `SPAWNS`."""
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return False
    seen.add(id(obj))
    if isinstance(obj, type):
        return _own(obj) and any(spawns(v, seen) for v in vars(obj).values())
    if isinstance(obj, (list, tuple, set, frozenset)):
        return any(spawns(v, seen) for v in obj)
    if isinstance(obj, dict):
        return any(spawns(v, seen) for v in obj.values())
    if _own(type(obj)) and hasattr(obj, "__dict__"):  # a row of a table of cases
        return any(spawns(v, seen) for v in vars(obj).values())
    if isinstance(obj, (staticmethod, classmethod, property)):
        return spawns(getattr(obj, "__func__", getattr(obj, "fget", None)), seen)
    func = _function(obj)
    if func is None or not _own(func):
        return False
    for code in _codes(func.__code__):
        for name in code.co_names:
            if name in SPAWNS:
                return True
            value = func.__globals__.get(name)
            if value is not None and spawns(value, seen):
                return True
    return False


def _reaches(item: pytest.Function) -> bool:
    """The test, its parameters or any fixture it uses reaches a name that starts a process."""
    seen: set[int] = set()
    if spawns(item.function, seen):
        return True
    callspec = getattr(item, "callspec", None)
    if callspec is not None and any(spawns(v, seen) for v in callspec.params.values()):
        return True
    defs = item._fixtureinfo.name2fixturedefs.values()
    return any(spawns(d.func, seen) for fixturedefs in defs for d in fixturedefs)


def mark_process_tests(items: list[pytest.Item]) -> None:
    """Mark `procs` every collected test that reaches a way of starting a process."""
    for item in items:
        if isinstance(item, pytest.Function) and _reaches(item):
            item.add_marker(MARK)


class SpawnGuard:
    """While an unmarked test runs, starting a process fails and is recorded against it."""

    def __init__(self) -> None:
        self.active = False
        self.spawned: list[str] = []

    def wrap(self, start: Callable[..., Any], what: str) -> Callable[..., Any]:
        def guarded(*args: Any, **kwargs: Any) -> Any:
            if self.active:
                self.spawned.append(f"{what}{_argv(args)} {_through()}")
                raise RuntimeError(
                    f"tiers: a test not marked {MARK!r} started a process ({what}); mark it"
                    f" `@pytest.mark.{MARK}`, or add the name that starts it to tests/tiers.py's"
                    " SPAWNS"
                )
            return start(*args, **kwargs)

        return guarded


def _argv(args: tuple[Any, ...]) -> str:
    """The command, where one of the first arguments looks like one (Popen's come second)."""
    commands = [a for a in args[:2] if isinstance(a, (list, tuple, str, bytes))]
    return f" {commands[0]!r}"[:160] if commands else ""


def _in_tests(filename: str) -> bool:
    return Path(filename).resolve().is_relative_to(TESTS)


def _through() -> str:
    """Where the test's own code handed over to what started the process: the name to mark by."""
    stack = traceback.extract_stack()
    own = [i for i, f in enumerate(stack) if _in_tests(f.filename) and f.filename != __file__]
    if not own or own[-1] + 1 >= len(stack):
        return ""
    here, callee = stack[own[-1]], stack[own[-1] + 1]
    return f"(from {Path(here.filename).name}:{here.lineno}, through {callee.name}())"


GUARD = SpawnGuard()
# Every way a Python process starts another: subprocess and asyncio (Popen), multiprocessing's
# spawn and forkserver (fork_exec), its fork method and the rest (os).
_GUARDED = [
    (subprocess.Popen, "_execute_child"),
    (_posixsubprocess, "fork_exec"),
    (os, "fork"),
    (os, "forkpty"),
    (os, "posix_spawn"),
    (os, "posix_spawnp"),
    (os, "system"),
    (os, "execv"),
    (os, "execve"),
]


def install_guard() -> None:
    """Route each way of starting a process through `GUARD` (once per pytest process)."""
    for owner, name in _GUARDED:
        start = getattr(owner, name, None)
        if start is not None:
            setattr(owner, name, GUARD.wrap(start, f"{getattr(owner, '__name__', owner)}.{name}"))


@pytest.hookimpl(wrapper=True)
def guard_runtest(item: pytest.Item) -> Iterator[None]:
    """Around a test's setup, call and teardown (its module's and session's fixtures included):
    an in-process test (one not marked `procs`) may start no process."""
    GUARD.active = item.get_closest_marker(MARK) is None
    try:
        return (yield)
    finally:
        GUARD.active = False


@pytest.hookimpl(wrapper=True)
def report_spawned(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[pytest.TestReport]:
    """Fail the phase of an in-process test in which it started a process, naming the command."""
    report: pytest.TestReport = yield
    if GUARD.spawned:
        report.outcome = "failed"
        report.longrepr = (
            f"{item.nodeid} is in the in-process tier but started a process ({call.when}):"
            f" {GUARD.spawned[0]}; mark it @pytest.mark.{MARK} (or add the name that starts it"
            " to tests/tiers.py's SPAWNS)"
        )
        GUARD.spawned.clear()
    return report
