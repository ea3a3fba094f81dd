"""How a run uses databases: which to start, the environment servers find them in, and the pool.

A run whose route waits in a database (`db`: PostgreSQL, `cache`: Redis) gets that database
started for it (lab.backends.databases), unless the user points at their own with
`--db-url`. Servers read the URLs and the driver from the environment, as every other app setting.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lab.backends import databases
from lab.backends.dbdata import DataSpec, Snapshot
from lab.config import appenv
from lab.config.models import Knobs
from lab.config.scenario import DB_ROUTES
from lab.record.errors import LabError


def needed(route: str, env: appenv.Env = ()) -> tuple[str, ...]:
    """The database kinds a route waits in, and those a user's app's --env names."""
    kinds = (DB_ROUTES[route],) if route in DB_ROUTES else ()
    return tuple(dict.fromkeys((*kinds, *appenv.databases(env))))


@contextlib.contextmanager
def exported(env: dict[str, str]) -> Iterator[None]:
    """Set environment variables for the servers started inside the block, then restore them."""
    previous = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for name, value in previous.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@contextlib.contextmanager
def serving(
    route: str,
    run_dir: Path,
    db_urls: tuple[str, ...] = (),
    driver: str | None = None,
    allow_remote: bool = False,
    host: str = "127.0.0.1",
    app_env: appenv.Env = (),
    data: DataSpec | None = None,
    fast: bool = False,
    cores: tuple[int, ...] = (),
) -> Iterator[dict[str, str]]:
    """The databases the route or the app's --env needs (the user's, else started here, on the
    server's `cores`; PostgreSQL without durability only if `fast`), exported to servers. With
    `data` (a user's app), its setup and seed run once and every `fresh_copy` is a copy of the
    result."""
    given = tuple(databases.user_database(url, allow_remote) for url in db_urls)
    named = (*app_env, *(("", command) for command in (data.setup if data else ())))
    kinds = needed(route, named)
    with databases.running(kinds, run_dir, given, host, fast, cores) as have:
        env = databases.environment(have)
        if driver:
            env = {**env, "LAB_DB_DRIVER": driver}
        with exported(env):
            snapshot = _prepared(data, given, env) if data is not None else None
            pids = {kind: db.proc.pid for kind, db in have.items() if db.proc is not None}
            served = Served(snapshot, "fast" if fast else "production", pids)
            _ACTIVE.append(served)
            try:
                yield env
            finally:
                _ACTIVE.remove(served)


@dataclass(frozen=True)
class Served:
    """The databases a run is serving: the snapshot of the app's data (None: no user's app),
    how durable the lab's PostgreSQL is, and the kinds the lab started with their processes."""

    snapshot: Snapshot | None
    durability: str
    pids: dict[str, int]  # kind -> the process of each database the lab started

    @property
    def started(self) -> tuple[str, ...]:
        """The kinds the lab started, in the environment's order."""
        return tuple(kind for kind in databases.ENV_NAMES if kind in self.pids)


_ACTIVE: list[Served] = []  # the databases being served, while they are


def _prepared(
    data: DataSpec, given: tuple[databases.Database, ...], env: dict[str, str]
) -> Snapshot:
    """The lab-started databases with the app's setup and seed run once (the user's own
    database, --db-url, is never set up, copied or written to by the lab)."""
    mine = {db.kind for db in given}
    if (data.setup or data.seed) and "postgres" in mine:
        raise LabError(
            "--db-setup and --db-seed run against the lab's own PostgreSQL; with --db-url your "
            "database is used as it is"
        )
    started = {
        kind: databases.Database(kind, env[name])
        for kind, name in databases.ENV_NAMES.items()
        if name in env and kind not in mine
    }
    snapshot = Snapshot(data, started.get("postgres"), started.get("redis"))
    snapshot.prepare()
    return snapshot


def processes() -> dict[str, int]:
    """The databases the lab started for the run being served, kind -> process id ({}: none):
    they are the app's, so each step samples them as part of the system under test."""
    return dict(_ACTIVE[-1].pids) if _ACTIVE else {}


def fresh_copy(label: str) -> dict[str, Any]:
    """A fresh copy of the run's snapshot for `label` (a model and trial), exported to the
    servers started next, and what the step's record says of it; {} where the run has none."""
    snapshot = _ACTIVE[-1].snapshot if _ACTIVE else None
    return snapshot.fresh(label) if snapshot is not None else {}


def describe() -> dict[str, Any]:
    """For the manifest: the databases the lab started, PostgreSQL's durability (`fast`: fsync,
    synchronous commit and full-page writes off) and the snapshot every copy is made from;
    {} where the run serves none."""
    if not _ACTIVE or not _ACTIVE[-1].started:
        return {}
    served = _ACTIVE[-1]
    said: dict[str, Any] = {"started": list(served.started)}
    if "postgres" in served.started:
        said["durability"] = served.durability
    if served.snapshot is not None:
        said["snapshot"] = served.snapshot.describe()
    return said


def pool_evidence(route: str, knobs: Knobs, users: int) -> dict[str, Any]:
    """Evidence for a step whose database pool holds fewer connections than it has users.

    Extra users then wait for a connection inside the server: the pool, not the model, limits.
    """
    if route not in DB_ROUTES:
        return {}
    connections = int(knobs.processes) * int(knobs.db_pool)
    if connections >= users:
        return {}
    return {
        "db_pool": {
            "connections": connections,
            "processes": knobs.processes,
            "db_pool": knobs.db_pool,
            "users": users,
            "message": f"{DB_ROUTES[route]} pool of {connections} connection(s) for {users} "
            f"users: the rest queue for a connection (raise --knob db_pool)",
        }
    }
