"""The lab's locust user, one class per server model, shared by every generator that uses locust.

Why a factory: the web UI's class picker shows one class per model, the headless locustfile runs
the same classes, and the lab's own per-step generator can build the very same user for one model.
Each user is closed loop with no think time (like `ab -c N`); a response counts as a success only
if its body is byte-identical to the one every model must send.

Why `plan` is a function: it is called before every request, so run parameters changed while a
test runs (upstream delay, its distribution, the route) apply to the next request of every user.
Requests are named `<model> <route>` (e.g. `gunicorn-gevent /io`) so locust's statistics table has
one row per model, and `loadgen.request.model_of(name)` gives the model back to whoever listens.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from locust import FastHttpUser, constant, task

from loadgen.client.errors import BadBody
from loadgen.request import Request, request_name
from loadgen.session import without_cookies

RequestPlan = Callable[[], Request]


class ModelUser(FastHttpUser):
    """One model's closed-loop user; `model_user` makes the concrete class."""

    abstract = True
    wait_time = constant(0)
    model = ""
    # How the model serves the user's app: "as is", "bridged" or "async port" (its
    # ASGI twin, which the user would have to write): the web UI labels every model with it.
    runs_app = ""
    plan: RequestPlan = staticmethod(lambda: Request("/io"))
    cookies = True  # locust's cookie jar (the web UI's users); the lab's generators send none

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if not self.cookies:
            without_cookies(self.client)

    @task
    def hit(self) -> None:
        req = type(self).plan()
        name = req.name or request_name(self.model, req.path)  # a mix's route: its own name
        headers = req.header_dict
        if req.expected is None:  # the lab's recorder checks bodies itself: no context to open
            self.client.request(req.method, req.path, name=name, data=req.body, headers=headers)
            return
        with self.client.request(
            req.method, req.path, name=name, data=req.body, headers=headers, catch_response=True
        ) as response:
            if response.status_code == 200 and response.content != req.expected:
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
    runs_app: str = "",
    cookies: bool = True,
) -> type[ModelUser]:
    """A concrete user class named after `model` (what the class picker and `-u` runs show)."""
    attrs = {
        "host": host,
        "model": model,
        "runs_app": runs_app,
        "cookies": cookies,
        "plan": staticmethod(plan),
        "network_timeout": timeout_s,
        "connection_timeout": connect_timeout_s,
        "weight": weight,
        "abstract": False,
        "__doc__": doc or f"closed-loop user of {model}",
        "__module__": __name__,
    }
    return type(model, (ModelUser,), attrs)
