"""What each knob means, in one place: docs/running.md's knob table is `markdown_table()` of the
built-in registry's defaults (tests/test_docs.py fails when they differ), so a knob added, renamed
or given a new default cannot leave the manual behind."""

from __future__ import annotations

from dataclasses import fields

from lab.config.models import Knobs

MEANINGS = {
    "processes": "server processes: what gunicorn, uvicorn and Granian call `--workers`, uWSGI "
    "`--processes` (one core for the server on a 2-core machine)",
    "concurrency": "requests one process serves at once: its threads, greenlets or coroutines "
    "(uWSGI `--threads` / `--gevent`, gunicorn `--threads` / `--worker-connections`, Granian "
    "`--blocking-threads` / `--backpressure`); the old name `workers` is still read, with a note",
    "backlog": "listen queue (uWSGI's own default, 100, drops bursts of connections)",
    "keepalive_s": "idle keep-alive in seconds (gunicorn and uvicorn models; see below)",
    "pool": "outbound connections to the upstream per process (`requests`' default of 10 is a "
    "trap)",
    "timeout_s": "per-request kill timeout (uWSGI harakiri, gunicorn timeout)",
    "db_pool": "PostgreSQL and Redis connections per process (`/db`, `/cache`); a pool smaller "
    "than the users is reported (`evidence.details.db_pool`)",
}
AUTO = {"concurrency": "the run's top level", "pool": "concurrency", "db_pool": "concurrency"}


def markdown_table(knobs: Knobs) -> str:
    """The knob table: name, default ("auto" says what it resolves to), meaning."""
    rows = ["| knob | default | meaning |", "|---|---|---|"]
    for f in fields(knobs):
        value = getattr(knobs, f.name)
        default = f"`auto` = {AUTO[f.name]}" if value == "auto" else str(value)
        rows.append(f"| `{f.name}` | {default} | {MEANINGS[f.name]} |")
    return "\n".join(rows)
