"""docs/failures-and-stops.md's "What listens where", read from the sockets: the table is
`lab.system.listeners.ROWS` (rendered into the page by `python -m lab.cli.reference`), each row
names a case, and each case here starts the command the row names with its defaults, reads the
address every process it started listens on (from /proc, while it runs) and checks it against
the row: the host, and the port where the row fixes one (a free one where it says so). Commands
whose default port is fixed run in a private network namespace where the kernel allows one, so a
busy machine's own port 8000 cannot fail them (elsewhere they run here, skipped only where this
machine holds one of their ports). That nothing a long command starts listens beyond
loopback at any moment is checked by tests/test_stop_anywhere.py, on every stop.
"""

from __future__ import annotations

import ipaddress
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from inspect import signature
from pathlib import Path

import psutil
import pytest

from lab.backends import databases
from lab.cli.reference import FAILURES
from lab.system import listeners
from tests.helpers import assert_page_current, lab_cli

ROOT = Path(__file__).resolve().parent.parent
LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp's st column
IN_PRIVATE_NET = (
    "import os, sys\nfrom experiments import netns\n"
    "netns.unshare_net()\nnetns.loopback_up()\nos.execvp(sys.argv[1], sys.argv[1:])"
)
FIXED = {5432, 5557, 6379, 8000, 8089, 18081}  # every fixed default: a free port is none of them
METER_PORT = 18999
TINY = ("--models", "uwsgi-threads", "--levels", "1", "--warmup", "0")
Address = tuple[str, int]


def hex_address(text: str) -> Address:
    """/proc/net/tcp{,6}'s "0100007F:1F40" (the address in the kernel's byte order)."""
    raw, port = text.split(":")
    words = bytes.fromhex(raw)
    packed = b"".join(words[i : i + 4][::-1] for i in range(0, len(words), 4))
    return str(ipaddress.ip_address(packed)), int(port, 16)


def listening(pid: int) -> set[Address]:
    """The addresses `pid` listens on, read in its own network namespace (/proc/PID/net)."""
    fds = Path(f"/proc/{pid}/fd")
    try:
        links = {os.readlink(fd) for fd in fds.iterdir()}
        tables = [Path(f"/proc/{pid}/net/{t}").read_text() for t in ("tcp", "tcp6")]
    except OSError:  # gone, or not ours to read
        return set()
    inodes = {link[8:-1] for link in links if link.startswith("socket:[")}
    found = set()
    for line in "".join(tables).splitlines():
        cells = line.split()
        if len(cells) > 9 and cells[3] == LISTEN and cells[9] in inodes:
            found.add(hex_address(cells[1]))
    return found


def program(name: str) -> Callable[[list[str]], bool]:
    """A process running the program `name` (uwsgi, redis-server: Redis retitles itself
    "redis-server HOST:PORT", in one argument)."""
    return lambda argv: bool(argv) and bool(argv[0]) and Path(argv[0].split()[0]).name == name


def module(name: str) -> Callable[[list[str]], bool]:
    """A Python process running `-m NAME` (a name ending in "." stands for its package's)."""

    def match(argv: list[str]) -> bool:
        at = argv.index("-m") + 1 if "-m" in argv[:-1] else 0
        return bool(at) and (argv[at] == name or name.endswith(".") and argv[at].startswith(name))

    return match


@dataclass(frozen=True)
class Command:
    """A command started with its defaults; `rows`: the case of each row it holds -> which of
    its processes listens for that row (by command line) and the fixed port the row names
    (None: a free one)."""

    argv: tuple[str, ...]  # {out} is a fresh folder
    rows: dict[str, tuple[Callable[[list[str]], bool], int | None]] = field(default_factory=dict)
    fixed_ports: bool = False  # run in a private network namespace where there is one


LAB_RUN = ("run", *TINY, "--duration", "20", "--out", "{out}")
COMMANDS = {
    "lab-run": Command(
        tuple(lab_cli(*LAB_RUN, "--route", "cache", "--generators", "2", "--engine", "lab")),
        {
            "run": (program("uwsgi"), None),
            "run-upstream": (module("servers.upstream"), None),
            "run-databases": (program("redis-server"), None),
            "master": (module("loadgen"), None),
        },
    ),
    "lab-run-remote": Command(
        tuple(lab_cli(*LAB_RUN, "--generators", "1", "--remote-generators", "1")),
        {"remote-master": (module("loadgen"), 5557)},
        fixed_ports=True,
    ),
    "lab-serve": Command(
        tuple(lab_cli("serve", "uwsgi-threads", "--meter-port", str(METER_PORT))),
        {"serve": (program("uwsgi"), 8000), "serve-meter": (module("lab.webui.meter"), METER_PORT)},
        fixed_ports=True,
    ),
    "lab-upstream": Command(
        tuple(lab_cli("upstream")), {"upstream": (module("servers.upstream"), 18081)}, True
    ),
    "lab-ui": Command(
        tuple(lab_cli("ui", "--models", "uwsgi-threads", "--out", "{out}")),
        {"ui": (module("locust"), 8089)},
        fixed_ports=True,
    ),
    "dbserve": Command(
        (sys.executable, "-m", "lab.cli.dbserve", "redis"),
        {"dbserve": (program("redis-server"), 6379)},
        fixed_ports=True,
    ),
    "lab-reproduce": Command(
        tuple(lab_cli("reproduce", "mixpanel", "--quick", "--out", "{out}")),
        {"reproduce": (module("experiments."), None)},
    ),
}


@cache
def private_net() -> bool:
    """Whether a private network namespace can be had here (root or CAP_SYS_ADMIN)."""
    probe = "from experiments import netns\nnetns.unshare_net()"
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True)
    return done.returncode == 0


def in_use(port: int) -> bool:
    """Whether something on this machine holds `port` on loopback now."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((listeners.LOOPBACK, port))
        except OSError:
            return True
    return False


def observe(command: Command, out: Path, timeout_s: float = 120) -> dict[str, set[Address]]:
    """Start `command`, read what each of its rows' processes listens on until every row has
    an address (or `timeout_s`), then stop it as Ctrl-C would."""
    argv = [a.replace("{out}", str(out)) for a in command.argv]
    if command.fixed_ports and private_net():
        argv = [sys.executable, "-c", IN_PRIVATE_NET, *argv]
    elif busy := [port for _, port in command.rows.values() if port and in_use(port)]:
        pytest.skip(f"no private network namespace here, and this machine uses ports {busy}")
    log = (out.parent / "command.log").open("wb")
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    seen: dict[str, set[Address]] = {row: set() for row in command.rows}
    try:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and proc.poll() is None:
            note(proc.pid, command, seen)
            if all(seen.values()):
                break
            time.sleep(0.2)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
    return seen


def note(pid: int, command: Command, seen: dict[str, set[Address]]) -> None:
    """Add what each row's processes in `pid`'s tree listen on now."""
    try:
        root = psutil.Process(pid)
        tree = [root, *root.children(recursive=True)]
    except psutil.Error:
        return
    for proc in tree:
        try:
            argv = proc.cmdline()
        except psutil.Error:
            continue
        for row, (match, _) in command.rows.items():
            if match(argv):
                seen[row] |= listening(proc.pid)


CASES = {row: name for name, command in COMMANDS.items() for row in command.rows}
ROWS = {row.case: row for row in listeners.ROWS if row.case}


def test_the_page_shows_the_table() -> None:
    assert_page_current(FAILURES, listeners.BEGIN, listeners.END, listeners.markdown)


def test_every_row_has_a_case_here_and_no_case_is_off_the_table() -> None:
    assert set(CASES) == set(ROWS)
    (compose,) = [row for row in listeners.ROWS if not row.case]  # tests/test_compose.py's
    assert compose.started_by == "`docker compose up`"


@pytest.mark.parametrize("name", COMMANDS, ids=list(COMMANDS))
def test_each_listener_is_where_its_row_says(name: str, tmp_path: Path) -> None:
    command = COMMANDS[name]
    out = tmp_path / "out"
    out.mkdir()
    seen = observe(command, out)
    log = (tmp_path / "command.log").read_text(errors="replace")[-3000:]
    for row, addresses in seen.items():
        default, (_, port) = ROWS[row].default, command.rows[row]
        assert addresses, f"{row}: nothing listened ({name}); its output:\n{log}"
        assert {host for host, _ in addresses} == {listeners.LOOPBACK}, (row, addresses)
        if port is None:
            assert default.startswith(listeners.LOOPBACK) and "free port" in default, row
            assert not {p for _, p in addresses} & FIXED, (row, addresses)
        else:
            assert f"{listeners.LOOPBACK}:{port}" in default or row == "serve-meter", row
            assert {p for _, p in addresses} == {port}, (row, addresses)


def test_the_remote_master_is_the_fixed_constant_the_code_uses() -> None:
    from lab.run.generators import choose

    assert choose(1, 1, None, False).master == listeners.REMOTE_MASTER
    assert choose(2, 0, None, False).master.endswith(":0")  # a free port, per step


@pytest.mark.parametrize("start", [databases.start_postgres, databases.start_redis])
def test_databases_listen_on_and_trust_loopback_only_unless_told(start: Callable[..., object]):
    defaults = {k: p.default for k, p in signature(start).parameters.items()}
    assert defaults["host"] == listeners.LOOPBACK and defaults["trust_peers"] is False


def test_another_address_is_trusted_alone() -> None:
    assert databases._own("10.0.0.5") == "host all all 10.0.0.5/32 trust\n"
    assert databases._own("0.0.0.0") == ""
