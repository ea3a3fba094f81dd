"""nginx in front of a model, configured as that server's own documentation recommends.

uWSGI's documentation calls its HTTP router a convenience and puts nginx in front speaking the
uwsgi protocol (`uwsgi_pass` to `--socket` on a unix socket); gunicorn's deployment page puts
nginx in front with buffering for slow clients (`proxy_pass`, HTTP/1.1 and an upstream
keepalive pool), and uvicorn's and Granian's docs do the same. Clients keep their connections to
nginx alive for every model, so each is reached the same way. The knobs are nginx's own, with
the lab's documented defaults; `FrontKnobs.parse` refuses a bad one before anything starts.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, fields, replace
from pathlib import Path

from lab.config.models import Model
from lab.record.errors import LabError, Refused
from lab.record.models import FRONTED

INSTALL = (
    "nginx not found: install it with `sudo apt-get install nginx-light` (or run scripts/setup.sh)"
)
FRONTS = ("bare", "nginx")  # what --front takes: bare = no front; both = side by side


@dataclass(frozen=True)
class FrontKnobs:
    """nginx's knobs. Each default says why it is what it is."""

    workers: int = 1  # worker_processes: one, pinned beside the server on its core(s)
    # worker_connections per worker: each client holds one connection and each request in flight
    # one more to the server, so 4096 covers 2,000 users (nginx's own default, 512, covers 256)
    connections: int = 4096
    # idle connections to an HTTP server kept per worker (`keepalive` in the upstream block);
    # uwsgi_pass has no pool: one connection per request over the unix socket, as uWSGI's docs
    keepalive: int = 256
    buffering: int = 1  # proxy/uwsgi buffering on (gunicorn's docs: it shields slow clients)
    client_keepalive_s: int = 75  # keepalive_timeout toward clients (nginx's default)

    @classmethod
    def parse(cls, pairs: dict[str, int | str]) -> FrontKnobs:
        """The knobs from `--front-knob NAME=VALUE` pairs; one line saying what to fix."""
        known = {f.name for f in fields(cls)}
        changes: dict[str, int] = {}
        for name, value in pairs.items():
            if name not in known:
                raise LabError(f"--front-knob {name}: unknown; known: {', '.join(sorted(known))}")
            text = str(value).lower()
            number = {"on": 1, "off": 0}.get(text) if name == "buffering" else None
            if number is None and not text.isdigit():
                raise LabError(f"--front-knob {name}={value}: a whole number is needed")
            number = int(text) if number is None else number
            if number < (0 if name == "buffering" else 1) or (name == "buffering" and number > 1):
                raise LabError(f"--front-knob {name}={value}: out of range")
            changes[name] = number
        return replace(cls(), **changes)


def fronts(value: str) -> tuple[str, ...]:
    """`--front nginx`, or `bare,nginx` for both side by side (each model twice, interleaved)."""
    names = tuple(dict.fromkeys(v.strip() for v in value.split(",") if v.strip()))
    bad = [n for n in names if n not in FRONTS]
    if bad or not names:
        raise LabError(f"--front {value}: choose from {', '.join(FRONTS)} (comma-separated)")
    return names


def binary(search: str | None = None) -> str:
    """nginx's path (PATH, then /usr/sbin, where Debian puts it and a user's PATH may not look),
    or a Refused (this machine lacks it: exit 3) that says how to install it, before anything
    starts."""
    where = os.pathsep.join((os.environ.get("PATH", ""), "/usr/sbin", "/sbin"))
    found = shutil.which("nginx", path=where if search is None else search)
    if found is None:
        raise Refused(INSTALL)
    return found


# What nginx's uwsgi_params file passes, written out so the config needs nothing from /etc/nginx.
UWSGI_PARAMS = (
    ("QUERY_STRING", "$query_string"),
    ("REQUEST_METHOD", "$request_method"),
    ("CONTENT_TYPE", "$content_type"),
    ("CONTENT_LENGTH", "$content_length"),
    ("REQUEST_URI", "$request_uri"),
    ("PATH_INFO", "$document_uri"),
    ("DOCUMENT_ROOT", "$document_root"),
    ("SERVER_PROTOCOL", "$server_protocol"),
    ("REQUEST_SCHEME", "$scheme"),
    ("HTTPS", "$https if_not_empty"),
    ("REMOTE_ADDR", "$remote_addr"),
    ("REMOTE_PORT", "$remote_port"),
    ("SERVER_PORT", "$server_port"),
    ("SERVER_NAME", "$server_name"),
)


@dataclass(frozen=True)
class Site:
    """Where nginx listens and what it passes to: a unix socket (uwsgi) or host:port (HTTP)."""

    listen: str  # host:port
    backlog: int
    server: str  # "unix:/path" or "127.0.0.1:PORT"
    uwsgi: bool
    server_keepalive_s: int  # the server's idle timeout: nginx drops pooled ones a second sooner


def config(knobs: FrontKnobs, site: Site, prefix: Path) -> str:
    """nginx.conf for one model: foreground master, everything under `prefix`, no access log."""
    temps = "\n".join(
        f"    {kind}_temp_path {prefix / ('tmp_' + kind)};"
        for kind in ("client_body", "proxy", "uwsgi", "fastcgi", "scgi")
    )
    onoff = "on" if knobs.buffering else "off"
    if site.uwsgi:
        params = "\n".join(f"            uwsgi_param {k} {v};" for k, v in UWSGI_PARAMS)
        location = f"            uwsgi_pass app;\n            uwsgi_buffering {onoff};\n{params}"
        pool = ""
    else:
        location = (
            "            proxy_pass http://app;\n            proxy_http_version 1.1;\n"
            '            proxy_set_header Connection "";\n'
            "            proxy_set_header Host $http_host;\n"
            f"            proxy_buffering {onoff};"
        )
        idle = max(1, site.server_keepalive_s - 1)
        pool = f"        keepalive {knobs.keepalive};\n        keepalive_timeout {idle}s;\n"
    # As root, nginx's workers would drop to nobody, who may not reach a socket or temp path in
    # the run directory: they run as the lab's own user instead, as the servers do.
    user = "user root;\n" if os.geteuid() == 0 else ""
    return f"""{user}daemon off;
master_process on;
worker_processes {knobs.workers};
pid {prefix / "nginx.pid"};
error_log {prefix / "error.log"} warn;
events {{
    worker_connections {knobs.connections};
}}
http {{
    access_log off;
{temps}
    keepalive_timeout {knobs.client_keepalive_s}s;
    keepalive_requests 1000000;
    upstream app {{
        server {site.server};
{pool}    }}
    server {{
        listen {site.listen} backlog={site.backlog};
        location / {{
{location}
        }}
    }}
}}
"""


UWSGI_HTTP_SOCKETS = ("--http-socket", "--http11-socket")  # uWSGI speaking HTTP itself


def behind(argv: list[str], socket: str) -> tuple[list[str], bool]:
    """A server's argv as nginx reaches it, and whether over the uwsgi protocol: uWSGI's HTTP
    socket becomes its own protocol on a unix socket (`--socket`, as uWSGI's docs put nginx in
    front); HTTP servers keep their command line, on a private port."""
    found = [flag for flag in UWSGI_HTTP_SOCKETS if flag in argv]
    if not found:
        return list(argv), False
    at = argv.index(found[0])
    return [*argv[:at], "--socket", socket, *argv[at + 2 :]], True


def argv(nginx: str, prefix: Path) -> list[str]:
    """nginx's command line: its own prefix, config and startup error log (never /etc, /var)."""
    conf, err = prefix / "nginx.conf", prefix / "error.log"
    return [nginx, "-p", f"{prefix}/", "-c", str(conf), "-e", str(err)]


def check(nginx: str, prefix: Path) -> None:
    """`nginx -t` on the written config: Refused (exit 3) with nginx's own words if it is
    refused. The config is the lab's own, from range-checked knobs, so a refusal is this
    machine's nginx (its version, modules or permissions), not the arguments."""
    done = subprocess.run(
        [*argv(nginx, prefix), "-t"], capture_output=True, text=True, timeout=30, check=False
    )
    if done.returncode != 0:
        said = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        raise Refused(f"nginx refused its config ({prefix / 'nginx.conf'}): {said}")


def variants(models: list[Model], chosen: tuple[str, ...]) -> list[Model]:
    """Each model as each chosen front: bare as it is, nginx as a twin named NAME+nginx."""
    out = []
    for model in models:
        out += [model] if "bare" in chosen else []
        if "nginx" in chosen:
            out.append(replace(model, name=model.name + FRONTED, front="nginx"))
    return out


@dataclass(frozen=True)
class Front:
    """What `--front` and `--front-knob` asked for, checked before anything starts."""

    names: tuple[str, ...]  # "bare", "nginx" or both
    knobs: FrontKnobs
    binary: str  # nginx's path ("" when no model is fronted)

    @classmethod
    def of(cls, front: str | None, pairs: dict[str, int | str], backend: str) -> Front | None:
        """None for a bare run; a LabError (one line) for a bad option or a missing nginx."""
        if front is None:
            if pairs:
                raise LabError("--front-knob: only with --front nginx (or bare,nginx)")
            return None
        names, knobs = fronts(front), FrontKnobs.parse(pairs)
        if "nginx" not in names:
            return cls(names, knobs, "")
        if backend != "native":
            raise LabError(f"--front nginx: needs --backend native (not {backend})")
        return cls(names, knobs, binary())
