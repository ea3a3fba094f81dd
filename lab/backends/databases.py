"""PostgreSQL and Redis from the distribution's packages, run by the lab for the length of a run.

Real apps wait on databases through drivers, and that is where concurrency models break (psycopg2
blocks the gevent hub unless psycogreen patches it). So the lab starts real servers, never mocks:
each in a fresh temporary directory, on loopback and a free port, through lab.system.procs
(own process
group, pid file in the run directory, so a later run finds and stops leftovers of a kill -9), and
stops and removes them afterwards. PostgreSQL refuses to run as root; as root it runs as the
unprivileged `postgres` user (Debian's package creates it).
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil

from lab.config import appenv
from lab.record.errors import LabError, Refused
from lab.system import procs, safety

READY_TIMEOUT_S = 30.0
INSTALL = "apt-get install postgresql redis-server (or run scripts/setup.sh as root)"
PG_USER = "lab"
LOOPBACK = ("127.0.0.1", "::1", "localhost")
PG_SETTINGS = ("max_connections=500",)
# `--db-durability fast` only: writes then cost less than in production (named in the record)
PG_FAST = ("fsync=off", "synchronous_commit=off", "full_page_writes=off")


@dataclass(frozen=True)
class Database:
    """One running database: its kind ("postgres" or "redis"), URL, and process."""

    kind: str
    url: str
    proc: procs.Proc | None = None  # None for a database the user runs (--db-url)
    tmp: Path | None = None  # its temporary directory, removed when it stops


def postgres_bindir() -> Path:
    """Where initdb and postgres live: on PATH, else Debian's /usr/lib/postgresql/<version>/bin."""
    found = shutil.which("initdb")
    if found and shutil.which("postgres"):
        return Path(found).resolve().parent
    versions = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"),
        key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0,
    )
    if not versions:
        raise Refused(f"PostgreSQL not found (initdb, postgres); install it: {INSTALL}")
    return Path(versions[-1]).parent


def redis_binary() -> str:
    found = shutil.which("redis-server")
    if not found:
        raise Refused(f"Redis not found (redis-server); install it: {INSTALL}")
    return found


def as_unprivileged(argv: list[str]) -> list[str]:
    """argv run as `postgres` when we are root (PostgreSQL refuses root), unchanged otherwise."""
    if os.geteuid() != 0:
        return argv
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        raise Refused(
            f"running as root and there is no `postgres` user for PostgreSQL; {INSTALL}"
        ) from None
    setpriv = shutil.which("setpriv")  # exec's in place: the pid file names postgres itself
    if setpriv:
        return [setpriv, "--reuid=postgres", "--regid=postgres", "--init-groups", "--", *argv]
    return ["runuser", "-u", "postgres", "--", *argv]


def _private_dir(prefix: str, owner: str | None) -> Path:
    path = Path(tempfile.mkdtemp(prefix=prefix))
    if owner and os.geteuid() == 0:
        entry = pwd.getpwnam(owner)
        os.chown(path, entry.pw_uid, entry.pw_gid)
    return path


def _initdb(bindir: Path, data: Path, log: Path) -> None:
    argv = as_unprivileged(
        [
            str(bindir / "initdb"),
            "-D",
            str(data),
            "-U",
            PG_USER,
            "--auth=trust",
            "-E",
            "UTF8",
            "--no-sync",
            "--no-instructions",
        ]
    )
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        done = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, timeout=120, check=False)
    if done.returncode != 0:
        raise Refused(f"PostgreSQL initdb failed (exit {done.returncode}); see {log}")


def start_postgres(
    run_dir: Path,
    host: str = "127.0.0.1",
    port: int = 0,
    trust_peers: bool = False,
    fast: bool = False,
) -> Database:
    """initdb in a fresh directory, then postgres on a free loopback port, as durable as in
    production (fsync and synchronous commit on) unless `fast`. Trust auth for loopback only
    (initdb's own pg_hba.conf); on another address, for that address too (this machine's
    clients reach it there), and for the hosts of its own subnets only with `trust_peers` (a
    Compose network, inside a container)."""
    bindir = postgres_bindir()
    tmp = _private_dir("lab-pg-", "postgres")
    log = run_dir / "logs" / "postgres.log"
    with _removed_on_failure(tmp):
        _initdb(bindir, tmp / "data", log)
        if host not in LOOPBACK:
            with open(tmp / "data" / "pg_hba.conf", "a") as hba:
                hba.write("host all all samenet trust\n" if trust_peers else _own(host))
        port = port or procs.free_port(host)
        chosen = (*PG_SETTINGS, *(PG_FAST if fast else ()))
        settings = [arg for s in chosen for arg in ("-c", s)]
        argv = as_unprivileged(
            [
                str(bindir / "postgres"),
                "-D",
                str(tmp / "data"),
                "-h",
                host,
                "-p",
                str(port),
                "-k",
                str(tmp),
                *settings,
            ]
        )
        proc = procs.start("postgres", argv, log_path=log, pid_dir=run_dir / "pids")
    return _ready(Database("postgres", f"postgresql://{PG_USER}@{host}:{port}/postgres", proc, tmp))


def _own(host: str) -> str:
    """pg_hba.conf's line trusting one address (not a wildcard: 0.0.0.0 and :: name no host)."""
    if host in ("0.0.0.0", "::", ""):
        return ""
    return f"host all all {host}/{128 if ':' in host else 32} trust\n"


def start_redis(
    run_dir: Path, host: str = "127.0.0.1", port: int = 0, trust_peers: bool = False
) -> Database:
    """redis-server on a free loopback port, no persistence, in a fresh directory. Redis'
    protected mode (no password: loopback clients only) is turned off only with `trust_peers`
    (a Compose network, inside a container)."""
    binary = redis_binary()
    tmp = _private_dir("lab-redis-", None)
    port = port or procs.free_port(host)
    argv = [
        binary,
        "--bind",
        host,
        "--port",
        str(port),
        "--dir",
        str(tmp),
        "--save",
        "",
        "--appendonly",
        "no",
        "--daemonize",
        "no",
        "--maxclients",
        "10000",
        *(("--protected-mode", "no") if trust_peers else ()),  # a Compose network's peers
    ]
    with _removed_on_failure(tmp):
        proc = procs.start(
            "redis", argv, log_path=run_dir / "logs" / "redis.log", pid_dir=run_dir / "pids"
        )
    return _ready(Database("redis", f"redis://{host}:{port}/0", proc, tmp))


@contextlib.contextmanager
def _removed_on_failure(tmp: Path) -> Iterator[None]:
    """A database's private directory, removed if it cannot be set up or its process started."""
    try:
        yield
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _ready(db: Database) -> Database:
    """Poll until the database answers a query; on failure stop it and remove its directory."""
    assert db.proc is not None
    deadline = time.monotonic() + READY_TIMEOUT_S
    last = "no answer yet"
    while time.monotonic() < deadline:
        if not db.proc.alive():
            last = f"exited with code {db.proc.popen.poll()}"
            break
        try:
            ping(db)
            return db
        except LabError as e:
            last = str(e)
        time.sleep(0.1)
    tail = " | ".join(db.proc.log_tail(3))
    stop(db)
    raise Refused(f"{db.kind} did not start ({last}); see {db.proc.log_path}: {tail}")


def ping(db: Database, timeout_s: float = 2.0) -> None:
    """One real round trip (SELECT 1 / PING); LabError naming the URL if it fails."""
    try:
        if db.kind == "postgres":
            import psycopg2

            with contextlib.closing(
                psycopg2.connect(db.url, connect_timeout=max(1, round(timeout_s)))
            ) as conn:
                conn.cursor().execute("SELECT 1")
        else:
            import redis

            redis.Redis.from_url(db.url, socket_timeout=timeout_s).ping()
    except Exception as e:  # the drivers' own error classes: refused, auth, unknown database
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise Refused(f"{db.kind} at {redacted(db.url)} refuses connections: {first}") from None


def redacted(url: str) -> str:
    """The URL without its password, for messages and manifests."""
    parts = urllib.parse.urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


def stop(db: Database) -> None:
    """Stop the database's process group and remove its temporary directory."""
    if db.proc is not None:
        db.proc.stop()
    if db.tmp is not None:
        shutil.rmtree(db.tmp, ignore_errors=True)


def url_kind(url: str, allow_remote: bool) -> str:
    """The kind of the user's database URL (--db-url), checked as input (before anything
    starts): postgresql:// or redis://, loopback only unless allowed."""
    parts = urllib.parse.urlsplit(url)
    kinds = {"postgresql": "postgres", "postgres": "postgres", "redis": "redis"}
    if parts.scheme not in kinds or not parts.hostname:
        raise LabError(
            f"--db-url {redacted(url)}: expected postgresql://HOST... or redis://HOST..."
        )
    safety.check_host(parts.hostname, "--db-url host", allow_remote=allow_remote)
    return kinds[parts.scheme]


def user_database(url: str, allow_remote: bool) -> Database:
    """The user's own database (--db-url): loopback only unless allowed, and it must answer."""
    db = Database(url_kind(url, allow_remote), url)
    ping(db)
    return db


ENV_NAMES = appenv.DB_VARIABLES  # the variables servers find the databases in


@contextlib.contextmanager
def running(
    kinds: tuple[str, ...],
    run_dir: Path,
    given: tuple[Database, ...] = (),
    host: str = "127.0.0.1",
    fast: bool = False,
    cores: tuple[int, ...] = (),
) -> Iterator[dict[str, Database]]:
    """Start each database kind not already `given` (PostgreSQL without durability if `fast`),
    pinned to `cores` when given (the server's: see `pin`); yield every database by kind, the
    user's and those started here (whose processes the run samples as part of the system under
    test).

    Everything started is stopped and removed when the block ends, however it ends.
    """
    mine: list[Database] = []
    try:
        have = {db.kind: db for db in given}
        for kind in kinds:
            if kind not in have:
                if kind == "postgres":
                    have[kind] = start_postgres(run_dir, host, fast=fast)
                else:
                    have[kind] = start_redis(run_dir, host)
                mine.append(have[kind])
                pin(have[kind], cores)
        yield have
    finally:
        for db in reversed(mine):
            stop(db)


def pin(db: Database, cores: tuple[int, ...]) -> None:
    """Keep a database the lab started on the server's cores, with the server, and off the
    generator's and the upstream's: it is part of the system under test. Left to the scheduler,
    a busy Redis ran on the generator's core and the step read as the lab's own limit (the
    generator waited for a CPU 13% of the window), not the database's. PostgreSQL's backends,
    forked per connection later, inherit the postmaster's affinity."""
    if not cores or db.proc is None:
        return
    try:
        root = psutil.Process(db.proc.pid)
        for proc in (root, *root.children(recursive=True)):
            proc.cpu_affinity(list(cores))
    except psutil.Error:  # it exited: its start already said why, or its stop will
        pass


def environment(have: dict[str, Database]) -> dict[str, str]:
    """The environment that points servers at the databases."""
    return {ENV_NAMES[db.kind]: db.url for db in have.values()}
