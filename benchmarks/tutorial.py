"""Every step of docs/tutorial.md run as a newcomer would run it, each one's real output kept as a
figure: what it printed, how long it took, its exit code, and the run and machine it came from
(`docs/figures/tutorial-*.json`, rendered into the page by `python -m analysis.docfigures
refresh`). A change to the lab that changes what a step prints shows up as a changed figure the
next time this runs; tests/test_examples.py runs the example files themselves on every CI run.

    .venv/bin/python benchmarks/tutorial.py            # every step: about ten minutes on 2 cores
    .venv/bin/python benchmarks/tutorial.py routes     # one step, by name
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from analysis.docfigures import RUN_ID
from analysis.docsummary import summarize
from lab.system import environment

ROOT = Path(__file__).resolve().parents[1]
FIGURES = ROOT / "docs" / "figures"
SITE = "examples/django-todo"
# The app as `lab run --app` takes it: the factory, its settings, its database made and seeded
# once, and a login per simulated user through Django's own form (CSRF from its cookie).
APP = (
    f"--app todosite.wsgi:application --app-dir {SITE} "
    "--env DJANGO_SETTINGS_MODULE=todosite.settings --env DATABASE_URL={postgres_url} "
    "--db-setup 'python manage.py migrate -v0' --db-setup 'python seed.py' "
    "--login 'POST /login/' --login-body 'username=lab&password=lab' "
    "--csrf cookie:csrftoken=header:X-CSRFToken,field:csrfmiddlewaretoken"
)
MODELS = "--models uwsgi-threads,gunicorn-gthread,gunicorn-gevent"
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
WRITTEN_RUN = re.compile(r"results/(\d{8}-\d{6}-[\w.-]+)")


@dataclass(frozen=True)
class Step:
    """One command of the tutorial and what of its output the page keeps."""

    name: str
    command: str
    kept: str
    since: str = ""  # keep the output's lines from the first that holds this ("": all) ...
    until: str = ""  # ... and before the first that holds this ("": to the end)


STEPS = [
    Step(
        "routes",
        f"lab routes --app todosite.wsgi:application --app-dir {SITE} --env "
        "DJANGO_SETTINGS_MODULE=todosite.settings",
        "the mix file lab routes printed (with --mix FILE it writes it there instead)",
    ),
    Step(
        "check",
        f"lab run {APP} --mix {SITE}/mix.toml {MODELS} --check-only",
        "what the check printed, the results directory shortened to results/",
    ),
    Step(
        "access-log",
        f"lab run {APP} --access-log {SITE}/access.log {MODELS} --check-only",
        "what it printed of the log, before the check (the same as step 3's) began",
        "every model, probe on",
    ),
    Step(
        "har",
        f"lab run {APP} --har {SITE}/session.har {MODELS} --check-only",
        "what it printed of the HAR file, before the check (the same as step 3's) began",
        "every model, probe on",
    ),
    Step(
        "sweep",
        f"lab run {APP} --mix {SITE}/mix.toml {MODELS} --levels 4,16 --duration 5",
        "what the sweep printed after its check (the same as step 3's): each step, the table, the "
        "limits, the answer",
        "→ results/",
    ),
]


def machine() -> str:
    env = environment.capture()
    cpu = str(env["cpu_model"]).replace("(R)", "")
    return (
        f"{env['cpus']} CPUs ({cpu}), Python {env['python']}, load average {os.getloadavg()[0]:.1f}"
    )


def kept(lines: list[str], step: Step) -> list[str]:
    """The lines of a step's output the page shows: from `since`, before `until`."""
    first = next((i for i, x in enumerate(lines) if step.since and step.since in x), 0)
    end = next((i for i, x in enumerate(lines) if step.until and step.until in x), len(lines))
    return lines[first:end]


def run(step: Step) -> dict[str, object]:
    """Run one step in the repository's root as a user would (`lab` on PATH) and keep what it
    printed, with the paths a user's machine would not share made relative."""
    env = {**os.environ, "PATH": f"{ROOT / '.venv' / 'bin'}:{os.environ['PATH']}", "COLUMNS": "100"}
    started = time.time()
    done = subprocess.run(  # one stream, in the order a terminal shows it
        ["bash", "-c", step.command], cwd=ROOT, env=env, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    wall = round(time.time() - started)
    text = ANSI.sub("", done.stdout.replace(f"{ROOT}/", ""))
    lines = [line.rstrip() for line in text.splitlines() if "\r" not in line]
    lines = kept(lines, step)
    made = WRITTEN_RUN.search(text)
    summary: dict[str, object] = {
        "run_id": made.group(1) if made else time.strftime(f"%Y%m%d-%H%M%S-{step.name}"),
        "machine": machine(),
        "date": time.strftime("%d %B %Y").lstrip("0"),
        "command": step.command,
    }
    if made and step.name == "sweep":
        summary |= summarize(ROOT / "results" / made.group(1), step.command)
    assert RUN_ID.match(str(summary["run_id"]))
    return {**summary, "wall_s": wall, "exit_code": done.returncode, "view": "run-text",
            "kept": step.kept, "text": lines}  # fmt: skip


def main(names: list[str]) -> None:
    chosen = [s for s in STEPS if not names or s.name in names]
    if not chosen:
        sys.exit(
            f"tutorial: no step named {' '.join(names)} (steps: {', '.join(s.name for s in STEPS)})"
        )
    for step in chosen:
        print(f"tutorial: {step.name}: {' '.join(shlex.split(step.command)[:2])} ...", flush=True)
        summary = run(step)
        out = FIGURES / f"tutorial-{step.name}.json"
        out.write_text(json.dumps(summary, indent=1, ensure_ascii=False) + "\n")
        print(f"tutorial: {step.name}: exit {summary['exit_code']} in {summary['wall_s']} s: {out}")


if __name__ == "__main__":
    main(sys.argv[1:])
