"""How a run uses databases: which to start, the environment servers find them in, and the pool.

A run whose route waits in a database (`db`: PostgreSQL, `cache`: Redis) gets that database
started for it (lab.backends.databases), unless the user points at their own with
`--db-url`. Servers read the URLs and the driver from the environment, as every other app setting.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from lab.backends import databases
from lab.config import appenv
from lab.config.models import Knobs
from lab.config.scenario import DB_ROUTES


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
) -> Iterator[dict[str, str]]:
    """The databases the route or the app's --env needs (the user's, else started here),
    exported to servers."""
    given = tuple(databases.user_database(url, allow_remote) for url in db_urls)
    with databases.running(needed(route, app_env), run_dir, given, host) as env:
        if driver:
            env = {**env, "LAB_DB_DRIVER": driver}
        with exported(env):
            yield env


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
