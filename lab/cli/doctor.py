"""`lab doctor`: does this host let a load test measure the servers rather than the kernel?

It compares the kernel and process limits that cap concurrent connections with the lab's
recommended values (`tuning/sysctl.conf`, `tuning/limits.conf`, also used by Compose), says how
many connections the current settings allow the load generator and a server, prints the exact
commands that change them, and lists processes left behind by runs whose lab process died.
"""

from __future__ import annotations

import json
import resource
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from lab.cli.common.options import results_dir_option
from lab.config.scenario import FD_MARGIN, FDS_PER_CONNECTION
from lab.run import leftovers
from lab.system.environment import read_sysctl
from lab.system.tuning import LIMITS_FILE, SYSCTL_FILE, read_nofile, read_sysctls

DROP_IN_SYSCTL = "/etc/sysctl.d/90-concurrency-lab.conf"
DROP_IN_LIMITS = "/etc/security/limits.d/90-concurrency-lab.conf"


@dataclass(frozen=True)
class Check:
    name: str
    current: str
    recommended: str
    ok: bool
    note: str
    command: str  # what changes it now (empty when nothing needs changing)


def _ints(value: str | None) -> list[int]:
    try:
        return [int(v) for v in (value or "").split()]
    except ValueError:
        return []


def check_sysctl(name: str, recommended: str) -> Check:
    current = read_sysctl(name)
    cur, rec = _ints(current), _ints(recommended)
    note = ""
    if not cur:
        ok, note = False, "not readable here"
    elif name.endswith("ip_local_port_range"):
        ok = len(cur) == 2 and cur[0] <= rec[0] and cur[1] >= rec[1]
        note = f"{cur[1] - cur[0] + 1} ephemeral ports" if len(cur) == 2 else ""
    elif name.endswith("tcp_tw_reuse"):
        ok = cur[0] in (1, 2)  # 2: reuse for loopback only, which is all the lab loads
        note = {0: "off", 1: "on", 2: "on for loopback only (enough for the lab)"}.get(cur[0], "")
    else:
        ok = cur[0] >= rec[0]
    value = f'"{recommended}"' if " " in recommended else recommended
    command = "" if ok else f"sudo sysctl -w {name}={value}"
    return Check(name, current or "?", recommended, ok, note, command)


def check_nofile(recommended: int) -> Check:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    hard_n = recommended if hard == resource.RLIM_INFINITY else hard
    if soft >= recommended:
        ok, note, command = True, "", ""
    elif hard_n >= recommended:
        ok, note = True, "native runs raise the soft limit to the hard one automatically"
        command = f"ulimit -n {recommended}"
    else:
        ok, note = False, f"hard limit {hard} is below {recommended}"
        command = f"sudo prlimit --pid $$ --nofile={recommended}:{recommended}"
    return Check("nofile (soft/hard)", f"{soft}/{hard}", str(recommended), ok, note, command)


def capacity() -> dict[str, Any]:
    """Concurrent connections the current limits allow, per role, on this host.

    A client connection costs one descriptor and one ephemeral port per target address and port;
    a server connection costs two descriptors (the client's socket and its own upstream socket),
    and its upstream connections are client connections to the upstream, so they need ports too.
    """
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    fds = 1 << 20 if hard == resource.RLIM_INFINITY else hard
    ports = _ints(read_sysctl("net.ipv4.ip_local_port_range"))
    n_ports = ports[1] - ports[0] + 1 if len(ports) == 2 else 0
    backlog = _ints(read_sysctl("net.core.somaxconn"))
    client = min(fds - FD_MARGIN, n_ports)
    server = min((fds - FD_MARGIN) // FDS_PER_CONNECTION, n_ports)
    return {
        "client_max_connections": max(client, 0),
        "server_max_connections": max(server, 0),
        "lab_max_level": max(min(client, server), 0),
        "accept_queue_max": backlog[0] if backlog else None,
        "limited_by": "open files" if fds - FD_MARGIN < n_ports else "ephemeral ports",
    }


def recommended_nofile() -> int:
    nofile = read_nofile()
    return nofile.get("soft", nofile.get("hard", 16384))


def checks() -> list[Check]:
    found = [check_sysctl(name, value) for name, value in read_sysctls().items()]
    found.append(check_nofile(recommended_nofile()))
    return found


def persistent_commands() -> list[str]:
    n = recommended_nofile()
    return [
        f"sudo install -m 644 {SYSCTL_FILE} {DROP_IN_SYSCTL} && sudo sysctl --system",
        f"sudo install -m 644 {LIMITS_FILE} {DROP_IN_LIMITS}   # then log in again",
        f"systemd services: LimitNOFILE={n}",
        f"containers (compose.yaml does this): docker run --sysctl net.core.somaxconn=4096 "
        f"--ulimit nofile={n}:{n} ...",
    ]


@click.command("doctor")
@results_dir_option("Results directory to search for leftovers of dead runs.")
@click.option("--clean", is_flag=True, help="Stop leftover processes and remove their pid files.")
@click.option("--json", "as_json", is_flag=True, help="Print the findings as JSON.")
def doctor(out: Path, clean: bool, as_json: bool) -> None:
    """Kernel and process limits vs the lab's recommendations, and what they allow."""
    found = checks()
    allowed = capacity()
    stray = leftovers.find(out)
    if clean and stray:
        leftovers.clean(stray)
    if as_json:
        click.echo(
            json.dumps(
                {
                    "checks": [asdict(c) for c in found],
                    "capacity": allowed,
                    "leftovers": [s.describe() for s in stray],
                    "cleaned": clean and bool(stray),
                },
                indent=2,
            )
        )
        return
    console = Console(soft_wrap=True)  # commands must stay copy-pastable on one line
    table = Table(title="load-testing limits (recommended: tuning/)")
    for column in ("setting", "current", "recommended", "", "note"):
        table.add_column(column, overflow="fold")
    for c in found:
        mark = "[green]ok" if c.ok else "[red]raise"
        table.add_row(c.name, c.current, c.recommended, mark, c.note)
    console.print(table)
    console.print(
        f"this host allows about [bold]{allowed['client_max_connections']}[/] concurrent client "
        f"connections and [bold]{allowed['server_max_connections']}[/] per server (2 descriptors "
        f"each), so levels up to [bold]{allowed['lab_max_level']}[/] (limited by "
        f"{allowed['limited_by']}); bursts of more than {allowed['accept_queue_max']} new "
        f"connections wait or are dropped (somaxconn)"
    )
    commands = [c.command for c in found if c.command]
    if commands:
        console.print("\nchange now (until reboot / this shell):")
        for command in commands:
            console.print(f"  {command}", markup=False, highlight=False)
    console.print("\nmake permanent:")
    for command in persistent_commands():
        console.print(f"  {command}", markup=False, highlight=False)
    if stray:
        verb = "cleaned" if clean else "found (remove with `lab doctor --clean`)"
        console.print(f"\n[yellow]leftovers of dead runs {verb}:")
        for item in stray:
            console.print(f"  {item.describe()}", markup=False, highlight=False)
