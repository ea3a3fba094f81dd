"""Docs that cannot go stale: every figure in README.md and docs/*.md is rendered from a committed
run summary (docs/figures/*.json, analysis/docfigures.py) and names its run, machine and date; no
table or output of measured figures stands outside such a block; the command reference in
docs/commands.md is the CLI's own, with every option of every command; and the quick run's time,
wherever it is said, is the committed run's.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from analysis.docfigures import BLOCK, view_quick_table
from analysis.docsummary import framework, records, summarize
from analysis.interfaces import answer, run_answer
from analysis.loading import load
from analysis.points import build
from tests.docscan import DOCS, ROOT, lab_help, options_of, scan, subcommands
from tests.fixture_run import FixtureStep, build_run

FIGURE_BLOCKS = [
    (doc, m.group("source"), m.group("view"), m.group("body"))
    for doc in DOCS
    for m in BLOCK.finditer(doc.read_text())
]
# Figures measured before the lab kept a run id for them: the list may only shrink (rerun the
# benchmark and commit its summary to take one off).
UNRECORDED_RUN_IDS = {
    "docs/figures/bench-loadgen-overhead.json",
    "docs/figures/bench-upstream-aiohttp-1000.json",
    "docs/figures/bench-upstream-capacity.json",
}
MEASURE = re.compile(
    r"^[\s≥~<>+-]*(\d[\d,]*(\.\d+)?\s*(ms|s|min|µs|%|MB|GB|kB|req/s|rps|x)?[\s,/()+-]*)+$"
)
MEASURED_MARK = re.compile(r"\d\s*(ms|s|min|µs|%|MB|GB|req/s|rps)\b|\d\.\d")


def measured_cell(cell: str) -> bool:
    """A table cell that is a measurement: numbers with a unit or a decimal point (1.00, 82 ms,
    13%, 26 s), not a bare count, a setting (2048) or a word."""
    text = re.sub(r"\([^)]*\)", "", cell.strip().strip("`*")).strip()
    return bool(text) and bool(MEASURE.match(text)) and bool(MEASURED_MARK.search(text))


def outside_figures(doc: Path) -> list[tuple[int, str]]:
    """Tables with three or more measured cells and `text` outputs with three or more measured
    figures that stand outside a figure block: (line, what)."""
    found: list[tuple[int, str]] = []
    inside, table_at, cells = False, 0, 0
    for number, line, language in scan(doc):
        inside = (inside or line.startswith("<!-- figure:")) and not line.startswith("<!-- /fig")
        if language == "text" and not inside:
            cells += len(re.findall(r"\d[\d,]*\.\d+|\d+\s*(?:ms|req/s|rps|MB|%)", line))
            table_at = table_at or number
            continue
        if language is None and line.startswith("|") and not inside:
            table_at = table_at or number
            cells += sum(measured_cell(c) for c in line.strip().strip("|").split("|"))
            continue
        if table_at and cells >= 3:
            found.append((table_at, f"{cells} measured figures"))
        table_at, cells = 0, 0
    if table_at and cells >= 3:  # a table that ends the page
        found.append((table_at, f"{cells} measured figures"))
    return found


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: d.name)
def test_every_measured_table_and_output_is_a_figure_from_a_summary(doc: Path) -> None:
    stray = outside_figures(doc)
    assert not stray, (
        f"{doc.name}: measured figures outside a figure block (line, what): {stray}; commit a "
        "summary under docs/figures/ and wrap them (analysis/docfigures.py)"
    )


@pytest.mark.parametrize(
    ("doc", "source", "view", "body"),
    FIGURE_BLOCKS,
    ids=[f"{d.name}:{s}:{v or ''}" for d, s, v, _ in FIGURE_BLOCKS],
)
def test_every_figure_is_its_summary_and_names_run_machine_date(
    doc: Path, source: str, view: str | None, body: str
) -> None:
    from analysis.docfigures import PROVENANCE, RUN_ID, load_summary, render
    from analysis.docsummary import digest

    summary = load_summary(source, ROOT)
    missing = [k for k in PROVENANCE if not str(summary.get(k) or "").strip()]
    assert not missing, f"{source}: no {', '.join(missing)}"
    assert RUN_ID.match(summary["run_id"]) or source in UNRECORDED_RUN_IDS, (
        f"{source}: run_id {summary['run_id']!r} is no run directory's name"
    )
    if "sha256" in summary:
        assert digest(Path(summary["image"]), ROOT) == summary["sha256"], (
            f"{summary['image']} is not the image {source} was made with"
        )
    assert body == render(source, view, ROOT), (
        f"{doc.name}: the figure from {source} differs from its summary; run `python -m "
        "analysis.docfigures refresh`"
    )


def test_the_figure_checks_found_the_figures() -> None:
    assert len(FIGURE_BLOCKS) >= 10
    assert measured_cell("26 s, 26 s") and measured_cell("82 ms") and measured_cell("0.99")
    assert not measured_cell("2048") and not measured_cell("yes") and not measured_cell("130 / 143")
    assert outside_figures(ROOT / "tests" / "hostile" / "stray-figure.md") == [
        (3, "3 measured figures")
    ]


def test_every_command_and_option_is_in_the_commands_page() -> None:
    """The reference section is the CLI's own (`python -m lab.cli.reference`), and every option
    `lab X --help` lists is in its command's part of it."""
    from lab.cli.reference import END, START, markdown

    text = (ROOT / "docs" / "commands.md").read_text()
    assert f"{START}\n{markdown()}\n{END}" in text, "run `python -m lab.cli.reference`"
    reference = text.split(START)[1].split(END)[0]
    parts = dict(re.findall(r"## `lab ?([\w-]*)`\n(.*?)(?=\n## |\Z)", reference, re.S))
    for sub in ["", *sorted(subcommands())]:
        listed = options_of(sub) if sub else options_of()
        assert sub in parts, f"commands.md's reference has no `lab {sub}`"
        listed -= {"--help", "-h"} if sub else set()  # said once, under `lab`
        missing = [o for o in sorted(listed) if f"`{o}`" not in parts[sub]]
        assert not missing, f"`lab {sub}`: {', '.join(missing)} not in docs/commands.md"


def test_the_quick_runs_time_is_the_measured_one_wherever_it_is_said() -> None:
    """README, `lab --help` and the scenario file say how long `quick` takes: the committed
    run's wall time, in whole minutes."""
    from analysis.docfigures import load_summary

    minutes = round(load_summary("docs/figures/quick.json", ROOT)["wall_s"] / 60)
    texts = {
        "README.md": (ROOT / "README.md").read_text(),
        "lab --help": lab_help(),
        "quick.toml": (ROOT / "loadgen" / "scenarios" / "quick.toml").read_text(),
    }
    for where, text in texts.items():
        said = [
            int(n) for n in re.findall(r"about (\d+) min", " ".join(text.replace("#", "").split()))
        ]
        assert said and set(said) == {minutes}, f"{where} says {said} min; the run took {minutes}"


def test_the_docs_answer_is_todays_answer_from_the_committed_steps(tmp_path: Path) -> None:
    """A summary keeps what every claim reads of each step, so the README's answer is computed
    by today's code: the same lines as from the run's own records."""
    steps = [
        FixtureStep(m, c, t, (rps * c,) * 3, (100.0 + c,) * 50)
        for m, rps in (("uwsgi-threads", 9.0), ("gunicorn-gevent", 8.0))
        for c in (1, 10)
        for t in (1, 2)
    ]
    run = load(build_run(tmp_path / "run", steps))
    s = summarize(run.run_dir, "lab run")
    assert answer(build(records(s)), s["runs_app"], s["kind"]) == run_answer(
        run.records, run.manifest, run.points
    )


def test_a_step_without_answers_shows_no_efficiency_and_no_p99() -> None:
    """A model that answered nothing at a level (gunicorn-sync's one process behind 512 users in
    docs/figures/reproduce-granian-long-io-sweep.json) has no efficiency and no p99: the table
    says `-`, never `nan`."""
    point = {"model": "gunicorn-sync", "rps": 9.8, "server_cpu_pct": 1.0, "client_cpu_pct": 3.0}
    s = {
        "models": ["gunicorn-sync"],
        "runs_app": {"gunicorn-sync": "as is"},
        "points": [
            {**point, "users": 64, "efficiency": 0.02, "p99_ms": 6504.4, "flags": []},
            {
                **point,
                "users": 512,
                "efficiency": float("nan"),
                "p99_ms": float("nan"),
                "flags": ["no_responses"],
            },
        ],
    }
    row = view_quick_table(s).splitlines()[-1]
    assert "nan" not in row
    assert row == "| gunicorn-sync | as is | 9.8 | 9.8 | - | 1% | 3% | no_responses |"


COMMITTED_ANSWERS = sorted(
    p
    for p in (ROOT / "docs" / "figures").glob("*.json")
    if '"answer"' in p.read_text() and '"rps"' in p.read_text()
)


@pytest.mark.parametrize("path", COMMITTED_ANSWERS, ids=lambda p: p.stem)
def test_a_committed_answer_is_todays_answer_from_its_steps(path: Path) -> None:
    """A sweep's summary that kept its run's printed answer and its steps (with each step's own
    throughput): today's code, given those steps, says what the run said (the configuration
    line beside it reads figures a summary does not keep)."""
    s = json.loads(path.read_text())
    if not all("rps" in st for st in s.get("steps", [])) or not s.get("steps"):
        pytest.skip(f"{path.name} keeps no per-step throughput")
    said = answer(build(records(s)), s["runs_app"], s.get("kind", "wsgi"), framework(s))
    assert said == s["answer"][: len(said)]
