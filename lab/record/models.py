"""What the record says of a model beside its figures: how it runs the user's app, and the name a
model takes behind a front.

Why at the bottom: the configuration decides both (`lab.config.models`, `lab.front.nginx`), the
manifest writes them, and the analysis reads them back from a run directory; with the words and
the naming here, the analysis reads a run without importing the layers that made it.
"""

from __future__ import annotations

from typing import Any

AS_IS, BRIDGED, ASYNC_PORT = "as is", "bridged", "async port"  # runs_app()'s answers
OWN_FRAMEWORK = "Flask"  # the lab's own app (servers/app_wsgi.py; its ASGI twin is Quart's port)
FRONTED = "+nginx"  # a fronted model's name: uwsgi-threads+nginx beside uwsgi-threads


def runs_app(model_app: str, bridge: str, app_kind: str = "wsgi") -> str:
    """How a model runs the app a user brings (`app_kind`: the lab's own is a Flask app, WSGI):
    "as is" on its own interface, "bridged" (a WSGI app behind a WSGI-to-ASGI bridge: unchanged,
    but a configuration of its own with its own cost), or "async port" (the lab's Quart twin: a
    Flask app would have to be ported to ASGI to get this)."""
    if bridge:
        return BRIDGED
    return AS_IS if model_app == app_kind else ASYNC_PORT


def models_run_app(manifest: dict[str, Any]) -> dict[str, str]:
    """Per model of a run, how it runs the user's app (`runs_app`), read from its manifest: the app
    is the scenario's `app` (`lab run --app`) or the lab's own Flask app (WSGI)."""
    kind = (manifest.get("scenario", {}).get("app") or {}).get("kind", "wsgi")
    return {
        name: runs_app(entry.get("app", "wsgi"), entry.get("bridge", ""), kind)
        for name, entry in (manifest.get("models") or {}).items()
    }


def app_framework(manifest: dict[str, Any]) -> str:
    """The framework of the app a run measured, read from its manifest: the lab's own app is
    Flask; a user's app as its import check found it ("": none the lab knows, or a run made
    before the check named it)."""
    app = manifest.get("scenario", {}).get("app")
    return str(app.get("framework", "")) if app else OWN_FRAMEWORK
