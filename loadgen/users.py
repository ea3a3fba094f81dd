"""The lab's locust user, one class per server model, shared by every generator that uses locust.

Why a factory: the web UI's class picker shows one class per model, the headless locustfile runs
the same classes, and the lab's own per-step generator can build the very same user for one model.
Each user is closed loop with no think time (like `ab -c N`); a response counts as a success only
if its body is byte-identical to the one every model must send.

Why `plan` is a function: it is called before every request, so run parameters changed while a
test runs (upstream delay, its distribution, the route) apply to the next request of every user.
Requests are named `<model> <route>` (e.g. `gunicorn-gevent /io`) so locust's statistics table has
one row per model, and `model_of(name)` gives the model back to whoever listens to requests.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass

from locust import FastHttpUser, constant, task

from loadgen.errors import BadBody
from loadgen.protocol import Start


@dataclass(frozen=True)
class Request:
    """What one user sends next: a path with its query, and the body that counts as a success
    (a user's own app may also need a method, a body and headers)."""

    path: str
    expected: bytes | None = None  # None: any 2xx body is a success
    method: str = "GET"
    body: str | None = None
    headers: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, start: Start) -> Request:
        """The step's request (the generator's recorder checks bodies, not the user)."""
        body = start.body if start.method != "GET" else None
        return cls(start.path, None, start.method, body, tuple(start.headers.items()))


RequestPlan = Callable[[], Request]


def request_name(model: str, path: str) -> str:
    """`<model> <route>`: one statistics row per model and route (the query is left out)."""
    return f"{model} {urllib.parse.urlsplit(path).path}"


def model_of(name: str) -> str:
    """The model a request name belongs to (the inverse of `request_name`)."""
    return name.split(" ", 1)[0]


class ModelUser(FastHttpUser):
    """One model's closed-loop user; `model_user` makes the concrete class."""

    abstract = True
    wait_time = constant(0)
    model = ""
    plan: RequestPlan = staticmethod(lambda: Request("/io"))

    @task
    def hit(self) -> None:
        req = type(self).plan()
        name = request_name(self.model, req.path)
        headers = dict(req.headers) or None
        with self.client.request(
            req.method, req.path, name=name, data=req.body, headers=headers, catch_response=True
        ) as response:
            if (
                req.expected is not None
                and response.status_code == 200
                and response.content != req.expected
            ):
                response.failure(BadBody(f"unexpected body {(response.content or b'')[:80]!r}"))


def model_user(
    model: str,
    host: str,
    plan: RequestPlan,
    *,
    timeout_s: float = 120.0,
    connect_timeout_s: float = 30.0,
    doc: str = "",
    weight: int = 1,
) -> type[ModelUser]:
    """A concrete user class named after `model` (what the class picker and `-u` runs show)."""
    attrs = {
        "host": host,
        "model": model,
        "plan": staticmethod(plan),
        "network_timeout": timeout_s,
        "connection_timeout": connect_timeout_s,
        "weight": weight,
        "abstract": False,
        "__doc__": doc or f"closed-loop user of {model}",
        "__module__": __name__,
    }
    return type(model, (ModelUser,), attrs)
