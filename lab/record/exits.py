"""The exit codes of every `lab` command, as data: the constants the commands exit with and the
rows of docs/failures-and-stops.md's table, in one place so that the two cannot disagree.

Why data: a table typed into the docs drifted from the code more than once (a run with no answer
exiting 0, locust's death read as a usage error, `nginx -t` as bad input). Here each row names its
code and the cases that provoke it (`cases`: ids that tests/test_exit_codes.py runs as real
commands, each a command and its input); `python -m lab.cli.reference` renders the rows into
docs/failures-and-stops.md between BEGIN and END, and tests/test_exit_codes.py fails when the
page differs from `markdown()` or a case has no test.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass

DONE = 0
NO_ANSWER = 1  # the command ran, but has no answer (see its row)
USAGE = 2  # bad input: click's convention for usage errors, and LabError
REFUSED = 3  # this machine's state refused it, not the arguments (Refused)
NOT_CONFIRMED = 4  # lab advise: not confirmed, the lab's own generators were the limit
ONLY_PORT = 5  # lab advise: only models that need the app ported to async meet the target
CHANGED = 6  # lab compare: a point changed beyond noise (throughput or p99)
OTHER_SCENARIO = 7  # lab compare: the two runs measured different scenarios
STOPPED = tuple(128 + s for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP))

BEGIN, END = "<!-- exits: python -m lab.cli.reference -->", "<!-- /exits -->"


@dataclass(frozen=True)
class Exit:
    """One row: the code(s), what they mean (Markdown), and the ids of the cases that provoke
    them (tests/test_exit_codes.py runs each)."""

    codes: tuple[int, ...]
    meaning: str
    cases: tuple[str, ...]


ROWS = (
    Exit(
        (DONE,),
        "done (also: `--resume` of a run that is already complete; `lab advise`: a model serves "
        "the app as it is; `lab compare`: nothing changed beyond noise)",
        ("models", "run-resume-complete", "advise-as-is-meets", "compare-unchanged"),
    ),
    Exit(
        (NO_ANSWER,),
        "the command ran but has no answer: `lab run`, no step measured an answer (each was "
        "skipped because its model failed to start or its check, answered nothing "
        "(`no_responses`) or lost its upstream (`upstream_down`): the flags say why); "
        "`lab run --app`, the app failed its check (the run directory's `appcheck.json` says "
        "why); `lab advise`, no model meets the target (the advice says why and how far); "
        "`lab compare`, no model and level was measured in both runs, so nothing was compared "
        "(a CI gate must not pass on nothing); `lab reproduce`, a row was not measured (its "
        "client was missing or failed: the row says why); `lab serve`, `lab upstream`, "
        "`lab ui`, `python -m lab.cli.dbserve`: a process it serves (the server, nginx, the "
        "upstream, locust) exited by itself or never became ready; `lab generator`: its "
        "workers failed before serving a step",
        (
            "run-no-model-ran",
            "run-no-responses",
            "app-check-failed",
            "advise-none-meets",
            "compare-nothing-compared",
            "serve-server-exited",
            "ui-locust-died",
        ),
    ),
    Exit(
        (USAGE,),
        "usage error: a bad option, value, scenario or models file, an `--app` that does not "
        "import (click's convention); nothing is left running or written (an `--app` is imported "
        "with the run's databases and upstream up, stopped and removed with it)",
        ("usage", "app-does-not-import", "run-bad-db-url"),
    ),
    Exit(
        (REFUSED,),
        "refused by this machine's state, not by the arguments: a port in use, an open-file "
        "limit too low, `--out` not writable, a run directory another lab process is running, "
        "nginx, PostgreSQL or Redis missing, PostgreSQL or Redis failing to start, this "
        "machine's nginx refusing the config the lab wrote (`nginx -t`), a database that "
        "refuses connections, no Docker Engine or lab image; "
        "`lab generator`: no generator master answered at `--connect` within "
        "`--master-timeout`",
        (
            "upstream-port-in-use",
            "report-unwritable",
            "redis-missing",
            "nginx-missing",
            "nginx-config-refused",
            "generator-no-master",
        ),
    ),
    Exit(
        (NOT_CONFIRMED,),
        "`lab advise`: not confirmed: no model that runs the app as it is met the target, and "
        "the lab's own generators were the limit on the most this machine gives for one of "
        "them (or, when no model met it, for any) (\"not confirmed on this machine: the lab's "
        'generators reached N req/s"): add generator cores (`--remote-generators`) or use a '
        "bigger machine. It wins over 5: whether the app needs a port is not known",
        ("advise-not-confirmed", "advise-held-back-beside-a-port"),
    ),
    Exit(
        (ONLY_PORT,),
        "`lab advise`: only models that need the app ported to async (ASGI) meet the target, and "
        "every model that runs the app as it is was measured to miss it (a CI gate on a Flask "
        "app fails)",
        ("advise-only-a-port",),
    ),
    Exit(
        (CHANGED,),
        "`lab compare`: a point changed beyond noise (throughput or p99; the one test of "
        "difference, Benjamini-Hochberg-corrected for the points compared, "
        "[statistics](statistics.md))",
        ("compare-changed",),
    ),
    Exit(
        (OTHER_SCENARIO,),
        "`lab compare`: the two runs measured different scenarios (delay, route or mix, app, "
        "front, models, levels or machine; said first, with the points only one run has): a "
        "change between them is the scenario's",
        ("compare-other-scenario",),
    ),
    Exit(
        STOPPED,
        "any command stopped by SIGINT (Ctrl-C, also `kill -INT` of a lab started with `&`) / "
        "SIGTERM / SIGHUP, everything it started stopped "
        "([stopping](#stopping-what-happens-to-every-process)); finished steps are kept, "
        "continue with `lab run --resume DIR` (`lab advise --resume DIR`)",
        ("sigint", "sigterm", "sighup"),
    ),
)


def markdown() -> str:
    """The table as docs/failures-and-stops.md shows it."""
    lines = ["| code | meaning |", "|------|---------|"]
    lines += [f"| {' / '.join(map(str, row.codes))} | {row.meaning} |" for row in ROWS]
    return "\n".join(lines)
