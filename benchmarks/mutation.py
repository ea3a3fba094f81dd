"""Mutation testing of the claims: which changes to the one test of difference and the code that
makes claims from it survive the tests that should catch them.

A property test that cannot fail (true by construction, or comparing a function with itself)
shows up here as a surviving mutant: the code was changed and every test still passed. The
script copies the working tree into a scratch directory, points mutmut (PyPI, `pip install
mutmut`; not a dependency of the lab: it pulls in textual, libcst and coverage) at the modules
given and at the tests that claim to cover them, runs it, and lists each surviving mutant with
its diff and the tests that ran the mutated function (the tests that should have killed it).
Each module's figures (mutants, killed, survived, no tests) can be kept in a summary for the docs
(docs/tests-that-cannot-fail.md), one row per module and stage (before or after tests
were added), rows of other modules and stages kept from earlier runs.

Not part of CI: a run takes minutes to hours depending on the modules; on a shared machine give
it one core (`nice -n 19 ... --max-children 1`). Usage:

    python benchmarks/mutation.py --max-children 1 --timeout 1800 \\
        --module analysis/metrics.py --only 'analysis.metrics.x_crossovers*' \\
        --summary docs/figures/bench-mutation.json --stage before
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.figures import write_summary

ROOT = Path(__file__).resolve().parent.parent
# Each module of the verdict and the claims, with the pure tests (no server started) that cover
# it: mutmut runs, for each mutant, only those of the tests that ran the mutated function.
SUITES: dict[str, tuple[str, ...]] = {
    "lab/verdict/difference.py": (
        "tests/test_claims_properties.py",
        "tests/test_claims_advise.py",
        "tests/test_judge.py",
        "tests/test_noise.py",
    ),
    "analysis/points.py": (
        "tests/test_points.py",
        "tests/test_skipped_trials.py",
        "tests/test_claims_properties.py",
    ),
    "analysis/judge.py": ("tests/test_judge.py", "tests/test_claims_properties.py"),
    "analysis/interfaces.py": ("tests/test_interfaces.py", "tests/test_claims_properties.py"),
    "analysis/metrics.py": (
        "tests/test_analysis.py",
        "tests/test_differences.py",
        "tests/test_claims_properties.py",
        "tests/test_crossings.py",
    ),
    "analysis/routes.py": ("tests/test_compare.py",),
    "analysis/claims.py": ("tests/test_differences.py",),
    "analysis/differences.py": (
        "tests/test_differences.py",
        "tests/test_crossings.py",
        "tests/test_claims_properties.py",
    ),
    "lab/verdict/power.py": ("tests/test_power.py",),
}
MODULES = tuple(SUITES)
HEADERS = ["module", "stage", "mutants", "killed", "survived", "no tests", "other", "not run"]
HEADERS += ["run"]  # each row's own run: rows of other modules and stages are kept
NAME = re.compile(r"^(?P<module>.+?)\.x[_\u01c1]")  # analysis.metrics.x_f__mutmut_1, .xǁClassǁm
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
        f"source_paths = {json.dumps(modules)}\n"
        f"pytest_add_cli_args_test_selection = {json.dumps(tests)}\n"
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


def statuses(where: Path) -> dict[str, str]:
    """Every mutant's name -> its status (`mutmut results --all true`)."""
    out = mutmut(where, "results", "--all", "true").stdout
    pairs = (line.strip().rsplit(": ", 1) for line in out.splitlines() if ": " in line)
    return {name: status for name, status in pairs}


def survivors(where: Path) -> list[str]:
    """The names of the mutants that survived."""
    return [name for name, status in statuses(where).items() if status == "survived"]


def counts(found: dict[str, str], modules: list[str]) -> dict[str, list[int]]:
    """Per module: mutants, killed, survived, no tests, other (timeout, suspicious, ...) and not
    run (left out by --only, or the run stopped)."""
    out = {m: [0] * 6 for m in modules}
    dotted = {m.removesuffix(".py").replace("/", "."): m for m in modules}
    order = ("killed", "survived", "no tests")
    for name, status in found.items():
        match = NAME.match(name)
        row = out.get(dotted.get(match.group("module"), "")) if match else None
        if row is None:
            continue
        row[0] += 1
        if status in order:
            row[1 + order.index(status)] += 1
        else:
            row[5 if status == "not checked" else 4] += 1
    return out


def keep(path: Path, modules: list[str], stage: str, found: dict[str, str], started: float) -> None:
    """This run's figures as rows of the summary at `path`; rows of other modules or stages kept."""
    old = json.loads(path.read_text())["rows"] if path.exists() else []
    run = time.strftime("%Y%m%d-%H%M%S-mutation", time.localtime(started))  # as write_summary
    new = [[m, stage, *map(str, row), run] for m, row in counts(found, modules).items()]
    ours = {(r[0], r[1]) for r in new}
    rows = sorted([r for r in old if (r[0], r[1]) not in ours] + new, key=_order)
    kept = (
        "each row: `mutmut results --all true` of the run it names, of this script on that module "
        "(rows of other modules and stages kept from earlier runs); other: timeout or "
        "suspicious; not run: left out by --only or by --timeout"
    )
    write_summary(path, "mutation", HEADERS, rows, kept, started)


def _order(row: list[str]) -> tuple[int, str]:
    at = MODULES.index(row[0]) if row[0] in MODULES else len(MODULES)
    return at, "0" if row[1] == "before" else row[1]


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
    parser.add_argument("--only", action="append", help="mutant names to run (globs, repeatable)")
    parser.add_argument("--summary", type=Path, help="keep each module's figures in this summary")
    parser.add_argument("--stage", default="before", help="the summary rows' stage")
    parser.add_argument("--max-children", type=int, default=2)
    parser.add_argument("--timeout", type=int, default=1800, help="seconds for the whole run")
    parser.add_argument("--show", type=int, default=60, help="survivors listed at most")
    args = parser.parse_args()
    modules = args.module or list(MODULES)
    tests = args.test or sorted({t for m in modules for t in SUITES.get(m, ())})
    where = scratch(modules, tests)
    print(f"scratch copy: {where}")
    started = time.time()
    try:
        subprocess.run(
            [sys.executable, "-m", "mutmut", "run", "--max-children", str(args.max_children)]
            + (args.only or []),
            cwd=where,
            timeout=args.timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        print(f"stopped after {args.timeout} s: the figures below are the mutants tested so far")
    report(where, args.show)
    if args.summary:
        keep(args.summary, modules, args.stage, statuses(where), started)


if __name__ == "__main__":
    main()
