"""A user's app's environment (`--env NAME=VALUE`, a scenario's `[env]`), with the lab's services
as placeholders.

Why: real apps read their settings from the environment (Django's `DJANGO_SETTINGS_MODULE`, a
database URL, an API's base URL). Loaded with production values, an app would call the real
services under the sweep's load; pointed at the lab's own (its mock upstream, the PostgreSQL and
Redis it starts for the run), every outbound wait is the lab's and on loopback. Those addresses
are known only when the run starts them (free ports), so a value names them by placeholder and
each server's environment is resolved when it starts.
"""

from __future__ import annotations

import os
import re
import urllib.parse
from collections.abc import Iterable, Mapping

from lab.record.errors import LabError

# placeholder -> what it stands for, in --help and the docs
PLACEHOLDERS = {
    "upstream_url": "the lab's mock upstream, http://HOST:PORT (its delay: --delay-ms)",
    "upstream_host": "its host",
    "upstream_port": "its port",
    "postgres_url": "a PostgreSQL the lab starts for the run, postgresql://...",
    "redis_url": "a Redis the lab starts for the run, redis://...",
}
# where the lab's started databases are found (exported by lab.backends.dbrun for every server)
DB_VARIABLES = {"postgres": "LAB_DB_URL", "redis": "LAB_REDIS_URL"}
PLACEHOLDER = re.compile(r"\{([a-z_]+)\}")
NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
Env = tuple[tuple[str, str], ...]


def parse(texts: Iterable[str], where: str = "--env") -> Env:
    """`NAME=VALUE` texts as pairs (a later NAME wins); LabError naming the bad one."""
    pairs: dict[str, str] = {}
    for text in texts:
        name, sep, value = text.partition("=")
        if not sep or not NAME.match(name):
            raise LabError(f"{where} {text!r}: expected NAME=VALUE, e.g. API_URL={{upstream_url}}")
        pairs[name] = check(value, f"{where} {name}")
    return tuple(pairs.items())


def from_table(table: Mapping[str, object], where: str) -> Env:
    """A scenario file's `[env]` table: every value a string."""
    bad = [k for k, v in table.items() if not isinstance(v, str)]
    if bad:
        raise LabError(f"{where}: [env] values must be strings: {', '.join(bad)}")
    return parse((f"{k}={v}" for k, v in table.items()), f"{where}: [env]")


def check(value: str, where: str) -> str:
    """The value, if every `{placeholder}` in it is one the lab knows."""
    unknown = [p for p in PLACEHOLDER.findall(value) if p not in PLACEHOLDERS]
    if unknown:
        raise LabError(
            f"{where}: unknown placeholder {{{unknown[0]}}}; known: "
            + ", ".join(f"{{{p}}}" for p in PLACEHOLDERS)
        )
    return value


def databases(env: Env) -> tuple[str, ...]:
    """The database kinds (postgres, redis) the environment names, so the run starts them."""
    used = {p for _, value in env for p in PLACEHOLDER.findall(value)}
    return tuple(kind for kind in DB_VARIABLES if f"{kind}_url" in used)


def resolve(value: str, upstream_url: str, environ: Mapping[str, str]) -> str:
    """The value with each placeholder replaced by the address the run started it at;
    LabError where a database was named that the run did not start."""
    upstream = urllib.parse.urlsplit(upstream_url)
    known = {
        "upstream_url": upstream_url,
        "upstream_host": upstream.hostname or "",
        "upstream_port": str(upstream.port or ""),
        **{f"{kind}_url": environ.get(name, "") for kind, name in DB_VARIABLES.items()},
    }

    def one(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in known:
            return match.group(0)
        if not known[name]:
            raise LabError(f"{{{name}}}: the lab runs no such service in this run")
        return known[name]

    return PLACEHOLDER.sub(one, value)


def resolved(env: Env, upstream_url: str) -> dict[str, str]:
    """The environment with its placeholders resolved, for a server started now (the databases'
    addresses are in this process's environment while the run serves them: lab.backends.dbrun)."""
    return {name: resolve(value, upstream_url, os.environ) for name, value in env}


def words() -> str:
    """The placeholders in one line, for --help."""
    return "; ".join(f"{{{p}}} {what}" for p, what in PLACEHOLDERS.items())
