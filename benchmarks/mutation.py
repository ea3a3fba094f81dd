"""Mutation testing of the claims: which changes to the one test of difference and the code that
makes claims from it survive the tests that should catch them.

A property test that cannot fail (true by construction, or comparing a function with itself)
shows up here as a surviving mutant: the code was changed and every test still passed. The
script copies the working tree into a scratch directory, points mutmut (PyPI, `pip install
mutmut`; not a dependency of the lab: it pulls in textual, libcst and coverage) at the modules
given and at the tests that claim to cover them, runs it, and lists each surviving mutant with
its diff and the tests that ran the mutated function (the tests that should have killed it).

Not part of CI: a run takes minutes to hours depending on the modules. Usage:

    python benchmarks/mutation.py --max-children 2 --timeout 1800 \\
        --module lab/verdict/difference.py --module analysis/judge.py
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODULES = (
    "lab/verdict/difference.py",
    "analysis/points.py",
    "analysis/judge.py",
    "analysis/interfaces.py",
)
TESTS = (
    "tests/test_claims_properties.py",
    "tests/test_claims_advise.py",
    "tests/test_judge.py",
    "tests/test_noise.py",
    "tests/test_interfaces.py",
    "tests/test_points.py",
)
COPIED = ("lab", "analysis", "tests", "servers", "loadgen", "benchmarks", "experiments", "docs")


def scratch(modules: list[str], tests: list[str]) -> Path:
    """The working tree (tracked and untracked, not ignored) in a scratch directory, with
    mutmut's configuration appended to its pyproject.toml."""
    where = Path(tempfile.mkdtemp(prefix="lab-mutation-"))
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    for name in listed:
        src = ROOT / name
        if src.is_file():
            (where / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, where / name)
    also = [d for d in COPIED if (where / d).is_dir()]
    config = (
        "\n[tool.mutmut]\n"
        f"paths_to_mutate = {json.dumps(modules)}\n"
        f"tests_dir = {json.dumps(tests)}\n"
        f"also_copy = {json.dumps(also)}\n"
        'pytest_add_cli_args = ["-p", "no:cacheprovider", "-q", "-x"]\n'
    )
    with open(where / "pyproject.toml", "a") as f:
        f.write(config)
    return where


def mutmut(where: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """One mutmut command in the scratch copy, its output captured."""
    argv = [sys.executable, "-m", "mutmut", *args]
    return subprocess.run(argv, cwd=where, capture_output=True, text=True, check=False)


def survivors(where: Path) -> list[str]:
    """The names of the mutants that survived (`mutmut results`)."""
    out = mutmut(where, "results").stdout
    return [line.split(":")[0].strip() for line in out.splitlines() if "survived" in line]


def covering(where: Path) -> dict[str, list[str]]:
    """Mangled function name -> the tests that ran it (mutmut's own stats)."""
    stats = where / "mutants" / "mutmut-stats.json"
    if not stats.exists():
        return {}
    data = json.loads(stats.read_text())
    return {k: sorted(v) for k, v in data.get("tests_by_mangled_function_name", {}).items()}


def report(where: Path, limit: int) -> None:
    """Each surviving mutant: its diff and the tests that should have killed it."""
    names = survivors(where)
    tests = covering(where)
    summary = mutmut(where, "export-cicd-stats")
    stats = where / "mutants" / "mutmut-cicd-stats.json"
    if summary.returncode == 0 and stats.exists():
        print("totals:", stats.read_text().strip())
    print(f"{len(names)} surviving mutant(s)")
    for name in names[:limit]:
        diff = mutmut(where, "show", name).stdout
        changed = [x for x in diff.splitlines() if x[:1] in "+-" and x[:3] not in ("+++", "---")]
        function = name.rsplit("__mutmut_", 1)[0]
        should = tests.get(function, [])
        print(f"- {name}: {' | '.join(changed)[:200]}")
        print(f"    should have been killed by: {', '.join(should[:4]) or 'no test ran it'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--module", action="append", help="a module to mutate (repeatable)")
    parser.add_argument("--test", action="append", help="a test file to run (repeatable)")
    parser.add_argument("--max-children", type=int, default=2)
    parser.add_argument("--timeout", type=int, default=1800, help="seconds for the whole run")
    parser.add_argument("--show", type=int, default=60, help="survivors listed at most")
    args = parser.parse_args()
    where = scratch(args.module or list(MODULES), args.test or list(TESTS))
    print(f"scratch copy: {where}")
    try:
        subprocess.run(
            [sys.executable, "-m", "mutmut", "run", "--max-children", str(args.max_children)],
            cwd=where,
            timeout=args.timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        print(f"stopped after {args.timeout} s: the figures below are the mutants tested so far")
    report(where, args.show)


if __name__ == "__main__":
    main()
