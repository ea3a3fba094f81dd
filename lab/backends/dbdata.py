"""The user's app's data: its schema and seed loaded once, then a fresh copy for every model.

Why: a production app needs its tables and some rows before a route that reads them answers
anything but 5xx, and a sweep whose models share one database lets the first model's writes
(rows, dead tuples, a warm cache, Redis keys) change the next one's result, so the order of the
models would decide the answer. So `--db-setup` commands (migrations: `flask db upgrade`,
`alembic upgrade head`, `psql {postgres_url} -f seed.sql`) and `--db-seed` (a plain SQL file or
a `pg_dump` custom archive) run once against a database of the lab's own, `lab_snapshot`; that
database is then the template every model (and every trial, and the import check) gets a fresh
copy of, `lab_data` (PostgreSQL's `CREATE DATABASE ... TEMPLATE`: a file copy, no replay), with
Redis flushed and its keys put back as they were. The user's own database (`--db-url`) is never
copied or written to by the lab.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import subprocess
import sys
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lab.backends.databases import Database, postgres_bindir
from lab.config import appenv
from lab.record.errors import LabError

SNAPSHOT_DB, COPY_DB = "lab_snapshot", "lab_data"
SETUP_TIMEOUT_S = 600.0
NO_UPSTREAM = "http://127.0.0.1:9"  # setup runs before the run's upstream exists
TAIL_LINES = 3


@dataclass(frozen=True)
class DataSpec:
    """What makes the app's data: setup commands, a seed file, where they run and with which
    environment (the app's --env, its placeholders resolved against the run's databases)."""

    setup: tuple[str, ...] = ()
    seed: Path | None = None
    cwd: Path | None = None
    env: appenv.Env = ()
    python_path: str = ""  # the app's import path, so `flask db upgrade` finds it
    bindir: str = ""  # the app's own venv's programs (--app-requirements); "" = the lab's Python

    def digest(self) -> str:
        """The snapshot's name: the same commands and the same seed make the same snapshot."""
        h = hashlib.sha256("\0".join(self.setup).encode())
        if self.seed is not None:
            h.update(self.seed.read_bytes())
        return h.hexdigest()[:12]


def with_database(url: str, name: str) -> str:
    """The PostgreSQL URL pointing at another database of the same server."""
    return urllib.parse.urlunsplit(urllib.parse.urlsplit(url)._replace(path=f"/{name}"))


class Snapshot:
    """The prepared data of a run's lab-started databases, and a fresh copy of it on demand."""

    def __init__(self, spec: DataSpec, postgres: Database | None, redis: Database | None) -> None:
        self.spec, self.postgres, self.redis = spec, postgres, redis
        self.name = f"snapshot {spec.digest()}"
        self.keys: list[tuple[bytes, int, bytes]] = []  # Redis: key, ttl ms, DUMP
        self.copies = 0

    def prepare(self) -> None:
        """Create the snapshot database, run the setup commands and the seed against it (the
        app's environment then names it), and remember Redis's keys."""
        if self.postgres is not None:
            self._admin(f"CREATE DATABASE {SNAPSHOT_DB}")
            os.environ["LAB_DB_URL"] = with_database(self.postgres.url, SNAPSHOT_DB)
        for command in self.spec.setup:
            self._run(command, "--db-setup")
        if self.spec.seed is not None:
            self._seed(self.spec.seed)
        if self.redis is not None:
            self.keys = _redis_dump(self.redis.url)

    def fresh(self, label: str) -> dict[str, Any]:
        """A fresh copy of the snapshot for `label` (a model, a trial, the import check),
        exported to the servers started next; what the record says of it."""
        if self.postgres is not None:
            self._admin(f"DROP DATABASE IF EXISTS {COPY_DB} WITH (FORCE)")
            self._admin(f"CREATE DATABASE {COPY_DB} TEMPLATE {SNAPSHOT_DB}")
            os.environ["LAB_DB_URL"] = with_database(self.postgres.url, COPY_DB)
        if self.redis is not None:
            _redis_restore(self.redis.url, self.keys)
        self.copies += 1
        return {"snapshot": {"name": self.name, "copy": self.copies, "for": label}}

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "setup": list(self.spec.setup),
            "seed": str(self.spec.seed) if self.spec.seed else None,
            "copies": "PostgreSQL CREATE DATABASE ... TEMPLATE; Redis flushed and restored",
        }

    def _admin(self, sql: str) -> None:
        assert self.postgres is not None
        import psycopg2

        conn = psycopg2.connect(self.postgres.url)
        try:
            conn.autocommit = True
            conn.cursor().execute(sql)
        except psycopg2.Error as e:
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise LabError(f"PostgreSQL refused {sql!r}: {first}") from None
        finally:
            conn.close()

    def _run(self, command: str, what: str, argv: list[str] | None = None) -> None:
        """One command in the app's directory and environment; LabError naming it, its exit
        code and its last lines of output when it fails."""
        environ = appenv.resolved(self.spec.env, NO_UPSTREAM)
        line = appenv.resolve(command, NO_UPSTREAM, os.environ)
        python = self.spec.bindir or str(Path(sys.executable).parent)
        path = os.pathsep.join(  # the app's Python (flask, alembic) and PostgreSQL's tools
            [python, str(postgres_bindir()), os.environ.get("PATH", "")]
        )
        extra = {
            "PATH": path,
            **({"PYTHONPATH": self.spec.python_path} if self.spec.python_path else {}),
        }
        try:
            done = subprocess.run(
                argv or ["bash", "-c", line],
                capture_output=True,
                text=True,
                timeout=SETUP_TIMEOUT_S,
                env={**os.environ, **environ, **extra},
                cwd=self.spec.cwd or Path.cwd(),
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise LabError(
                f"{what} {command!r}: still running after {SETUP_TIMEOUT_S:g} s"
            ) from None
        if done.returncode != 0:
            lines = (done.stdout + done.stderr).strip().splitlines()[-TAIL_LINES:]
            said = " | ".join(lines) or "no output"
            raise LabError(f"{what} {command!r} exited {done.returncode}: {said}")

    def _seed(self, path: Path) -> None:
        """A plain SQL file through psql (stopping at its first error), or a pg_dump custom
        archive through pg_restore."""
        if not path.is_file():
            raise LabError(f"--db-seed {path}: no such file")
        if self.postgres is None:
            raise LabError("--db-seed: the app's --env names no {postgres_url}")
        url = os.environ["LAB_DB_URL"]
        with open(path, "rb") as f:
            archive = f.read(5) == b"PGDMP"
        argv = (
            ["pg_restore", "--no-owner", "--no-privileges", "--exit-on-error", "-d", url, str(path)]
            if archive
            else ["psql", "-v", "ON_ERROR_STOP=1", "-q", "-d", url, "-f", str(path)]
        )
        self._run(str(path), "--db-seed", argv)


def _redis_dump(url: str) -> list[tuple[bytes, int, bytes]]:
    import redis

    client = redis.Redis.from_url(url)
    found = []
    for key in client.scan_iter(count=1000):
        dumped = client.dump(key)
        if dumped is not None:
            found.append((key, max(int(client.pttl(key)), 0), dumped))
    return found


def _redis_restore(url: str, keys: list[tuple[bytes, int, bytes]]) -> None:
    import redis

    client = redis.Redis.from_url(url)
    client.flushall()
    for key, ttl, dumped in keys:
        with contextlib.suppress(redis.ResponseError):  # a key that expired since
            client.restore(key, ttl, dumped, replace=True)
