"""Every socket the lab listens on, as data: docs/failures-and-stops.md's "What listens where".

Why data: the typed table drifted (it named a `--host` that `lab advise` and `lab ui` do not
have, a free port where `--remote-generators` fixes one, and left listeners out). Each row names
the case that tests/test_listeners.py starts to read the row's default address from the real
socket while the command runs; `python -m lab.cli.reference` renders the rows into
docs/failures-and-stops.md between BEGIN and END, and the test fails when the page differs from
`markdown()` or a row has no case. The addresses the lab's own code fixes are constants here
(`lab.run.generators` binds the master at them); the commands' option defaults are read from
their sockets by the test.
"""

from __future__ import annotations

from dataclasses import dataclass

LOOPBACK = "127.0.0.1"
REMOTE_MASTER = f"{LOOPBACK}:5557"  # remote workers must know the port before the run starts

BEGIN, END = "<!-- listeners: python -m lab.cli.reference -->", "<!-- /listeners -->"


@dataclass(frozen=True)
class Listener:
    """One row: what listens, which command starts it, where by default and how to change it;
    `case`: the id tests/test_listeners.py provokes it by ("" for one this machine cannot run
    in a test: the Compose services, checked from compose.yaml by tests/test_compose.py)."""

    what: str
    started_by: str
    default: str
    change: str
    case: str


ROWS = (
    Listener(
        "each model's server, nginx in front of it",
        "`lab run`, `lab advise`, `lab ui`, `--app`'s check",
        f"{LOOPBACK}, free ports",
        "`lab run --host` (beyond loopback: `--allow-remote`); `lab advise` and `lab ui` have "
        "no `--host`: always loopback",
        "run",
    ),
    Listener(
        "the model's server",
        "`lab serve`",
        f"{LOOPBACK}:8000",
        "`--host` with `--allow-remote`, `--port`",
        "serve",
    ),
    Listener(
        "a meter",
        "`lab serve --meter-port`",
        "the server's address, that port",
        "follows `--host`",
        "serve-meter",
    ),
    Listener(
        "the mock upstream",
        "`lab run`, `lab advise`, `lab ui`",
        f"{LOOPBACK}, a free port",
        "`lab run --host`",
        "run-upstream",
    ),
    Listener(
        "the mock upstream",
        "`lab upstream`",
        f"{LOOPBACK}:18081",
        "`--host` with `--allow-remote`, `--port`",
        "upstream",
    ),
    Listener(
        "locust's web UI",
        "`lab ui`",
        f"{LOOPBACK}:8089",
        "`--port`",
        "ui",
    ),
    Listener(
        "the generators' master",
        "each step of `lab run` or `lab advise` on more than one generator process (`--generators "
        "2` or more; by default on 6 or more cores: every closed-loop step, open-loop steps above "
        "2,000 req/s)",
        f"{LOOPBACK}, a free port per step",
        "`--master HOST:PORT` (beyond loopback: `--allow-remote`)",
        "master",
    ),
    Listener(
        "the generators' master",
        "each step of `lab run` or `lab advise` with `--remote-generators`",
        f"{REMOTE_MASTER} (a fixed port: `lab generator --connect` on other machines names it)",
        "`--master HOST:PORT` (beyond loopback: `--allow-remote`)",
        "remote-master",
    ),
    Listener(
        "PostgreSQL, Redis",
        "a run of `/db` or `/cache`; `--app` whose `--env` names `{postgres_url}` or `{redis_url}`",
        f"{LOOPBACK}, free ports; trust for loopback only",
        "`lab run --host`",
        "run-databases",
    ),
    Listener(
        "PostgreSQL, Redis",
        "`python -m lab.cli.dbserve`",
        f"{LOOPBACK}:5432, {LOOPBACK}:6379; trust for loopback only",
        "`--host`, `--port`; `--trust-peers` (a container's own network)",
        "dbserve",
    ),
    Listener(
        "an experiment's servers, its upstream, PostgreSQL, nginx",
        "`lab reproduce`",
        f"{LOOPBACK}, free ports (uwsgi-blog's cases in a network namespace of their own where "
        f"the kernel allows one; its Docker cases published on {LOOPBACK})",
        "none",
        "reproduce",
    ),
    Listener(
        "every service",
        "`docker compose up`",
        f"all addresses inside its container; published on {LOOPBACK}",
        "`LAB_MASTER_BIND` for the locust master's port",
        "",
    ),
)


def markdown() -> str:
    """The table as docs/failures-and-stops.md shows it."""
    lines = [
        "| listener | started by | address by default | to change it |",
        "|---|---|---|---|",
    ]
    lines += [f"| {r.what} | {r.started_by} | {r.default} | {r.change} |" for r in ROWS]
    return "\n".join(lines)
