"""docs/running.md's "What listens where", checked against the code: each default address the
table names is the one the command really uses. (That nothing a long command starts listens
beyond loopback at run time is checked by tests/test_stop_anywhere.py, on every stop.)"""

from __future__ import annotations

from collections.abc import Callable
from inspect import signature
from pathlib import Path

import click
import pytest

from lab.backends import databases
from lab.cli import dbserve
from lab.cli.serve import serve
from lab.cli.ui import HOST, ui
from lab.cli.upstream import upstream
from lab.config.scenario import load_scenario
from lab.run.generators import DEFAULT_MASTER

ROOT = Path(__file__).resolve().parent.parent


def default(command: click.Command, name: str) -> str:
    (param,) = [p for p in command.params if p.name == name]
    return str(param.default)


def rows() -> dict[tuple[str, str], str]:
    """(listener, started by) -> the "address by default" cell."""
    text = (ROOT / "docs/running.md").read_text()
    section = text.split("### What listens where", 1)[1].split("\n#", 1)[0]
    cells = [
        [c.strip() for c in line.strip("|").split("|")]
        for line in section.splitlines()
        if line.startswith("| ") and not line.startswith("| listener")
    ]
    return {(c[0], c[1]): c[2] for c in cells}


def dbserve_default() -> str:
    args = dbserve.parser().parse_args(["redis"])
    ports = sorted(dbserve.PORTS.values())
    return ", ".join(f"{args.host}:{port}" for port in ports)


EXPECTED: dict[tuple[str, str], Callable[[], str]] = {
    ("each model's server, nginx in front of it", "`lab run`, `lab advise`, `lab ui`"): lambda: (
        load_scenario("quick").host
    ),
    ("the model's server", "`lab serve`"): lambda: (
        f"{default(serve, 'host')}:{default(serve, 'port')}"
    ),
    ("the mock upstream", "`lab run`, `lab advise`, `lab ui`"): lambda: load_scenario("quick").host,
    ("the mock upstream", "`lab upstream`"): lambda: (
        f"{default(upstream, 'host')}:{default(upstream, 'port')}"
    ),
    ("locust's web UI", "`lab ui`"): lambda: f"{HOST}:{default(ui, 'port')}",
    (
        "the generators' master",
        "a step with `--generators` or `--remote-generators`",
    ): lambda: DEFAULT_MASTER.rpartition(":")[0],
    ("PostgreSQL, Redis", "a run of `/db` or `/cache`"): lambda: str(
        signature(databases.start_postgres).parameters["host"].default
    ),
    ("PostgreSQL, Redis", "`python -m lab.cli.dbserve`"): dbserve_default,
}


def test_the_table_lists_every_listener_checked_here() -> None:
    listed = {key for key in rows() if key[0] not in ("a meter", "every service")}
    assert listed == set(EXPECTED)


@pytest.mark.parametrize("key", EXPECTED, ids=[" ".join(k)[:40] for k in EXPECTED])
def test_each_default_address_is_the_codes(key: tuple[str, str]) -> None:
    address = EXPECTED[key]()
    assert address.startswith("127.0.0.1")
    assert rows()[key].startswith(address), (rows()[key], address)


@pytest.mark.parametrize("start", [databases.start_postgres, databases.start_redis])
def test_databases_listen_on_and_trust_loopback_only_unless_told(start: Callable[..., object]):
    defaults = {k: p.default for k, p in signature(start).parameters.items()}
    assert defaults["host"] == "127.0.0.1" and defaults["trust_peers"] is False


def test_another_address_is_trusted_alone() -> None:
    assert databases._own("10.0.0.5") == "host all all 10.0.0.5/32 trust\n"
    assert databases._own("0.0.0.0") == ""
