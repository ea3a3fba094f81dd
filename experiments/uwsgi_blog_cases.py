"""The cases of `uwsgi-blog` (experiments/uwsgi_blog.py): the published ones, the variants that
decide the outcome, the blog's original conditions, a published Docker port, and nginx in front.

Kept apart from the experiment's code so each stays small: this is the table of what is measured,
uwsgi_blog.py how one case is run and shown.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from experiments.uwsgi_blog_gaps import (
    DOCKERISED,
    EXPONENTIAL,
    FRONT,
    FRONTED,
    ORIGINAL,
    QUEUES_128,
    Settings,
)


@dataclass(frozen=True)
class Case:
    """One measured configuration: a uWSGI model at c workers/greenlets, ab -c c -n n."""

    name: str
    model: str  # "threads" | "gevent"
    c: int
    n: int
    patch: str = ""  # gevent only: "late" (--gevent-monkey-patch) or "early"
    listen: int = 100
    one_core: bool = False  # server pinned to one CPU, client to another
    lookup: str = "module"  # where the view finds sleep: "module" (import at top) or "view"
    published: str = ""  # key in uwsgi_blog.toml [figures]
    settings: Settings = ()  # the case's network namespace's sysctls (netns.SETTINGS)
    shared_cpu: bool = False  # server and client both on one CPU, as on a one-CPU VM
    client: str = "lab"  # "lab" (experiments.abclient) or "ab" (ApacheBench)
    seconds: bool = False  # always at the published 1 s sleep, compared in seconds
    docker: bool = False  # the server in the lab image, the client here on its published port
    front: str = ""  # "nginx": uWSGI on a unix socket (--socket) behind nginx's uwsgi_pass


def original(name: str, model: str, client: str = "lab", published: str = "") -> Case:
    """A 1000/1000 case under ORIGINAL conditions; gevent as in the published case."""
    gevent = model == "gevent"
    return Case(
        name,
        model,
        1000,
        2000,
        "late" if gevent else "",
        lookup="view" if gevent else "module",
        published=published,
        settings=ORIGINAL,
        shared_cpu=True,
        client=client,
        seconds=True,
    )


CASES: tuple[Case, ...] = (
    Case("threads 10", "threads", 10, 100, published="threads_10"),
    Case(
        "gevent 10, late patch, sleep looked up in view",
        "gevent",
        10,
        100,
        "late",
        lookup="view",
        published="gevent_10",
    ),
    Case("threads 1000", "threads", 1000, 2000, published="threads_1000", seconds=True),
    Case(
        "gevent 1000, late patch, sleep looked up in view",
        "gevent",
        1000,
        2000,
        "late",
        lookup="view",
        published="gevent_1000",
        seconds=True,
    ),
    Case("gevent 1000, late patch, module-level import", "gevent", 1000, 2000, "late"),
    Case("gevent 1000, early patch", "gevent", 1000, 2000, "early"),
    Case("threads 1000, listen 4096", "threads", 1000, 2000, listen=4096),
    Case("gevent 1000, early patch, listen 4096", "gevent", 1000, 2000, "early", listen=4096),
    Case("threads 1000, server on one core", "threads", 1000, 2000, one_core=True),
    Case(
        "gevent 1000, early patch, server on one core", "gevent", 1000, 2000, "early", one_core=True
    ),
    original("threads 1000, original conditions", "threads", published="threads_1000"),
    original("gevent 1000, original conditions", "gevent", published="gevent_1000"),
    original("threads 1000, original conditions, ab", "threads", "ab", published="threads_1000"),
    original("gevent 1000, original conditions, ab", "gevent", "ab", published="gevent_1000"),
    Case("threads 1000, somaxconn 128", "threads", 1000, 2000, settings=QUEUES_128, seconds=True),
    Case(
        "threads 1000, exponential SYN backoff",
        "threads",
        1000,
        2000,
        settings=EXPONENTIAL,
        seconds=True,
    ),
    Case("threads 1000, one CPU for both", "threads", 1000, 2000, shared_cpu=True, seconds=True),
)


def through_docker(case: Case) -> Case:
    """`case` with its server in the lab image, reached through a published port (the blog's
    `docker run -p 3000:3000`, ab on the host)."""
    return replace(case, name=f"{case.name}, published Docker port", docker=True)


CASES += tuple(through_docker(c) for c in CASES if c.name in DOCKERISED)
# The post's production shape: its service ran uWSGI behind nginx, which is how uWSGI's docs
# deploy it (uwsgi_pass to --socket, no HTTP router). The published 1000/1000 cases behind it.
CASES += tuple(
    replace(c, name=c.name + FRONT, front="nginx")
    for c in CASES
    if c.name + FRONT in FRONTED and not c.docker
)
