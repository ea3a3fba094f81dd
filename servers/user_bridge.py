"""A declared bridge: a user's WSGI app (LAB_BRIDGED_APP="module:attribute") behind asgiref.

It lets a WSGI app run under an asyncio server, but WsgiToAsgi runs each worker's requests on one
thread, one at a time; the lab flags every model that serves through it as `bridged`. WsgiToAsgi
refuses the lifespan scope, which uvicorn's `--lifespan on` sends first and treats as a failed
start, so the bridge answers it itself: a WSGI app has nothing to start or stop.
"""

import importlib
import os
from typing import Any

from asgiref.wsgi import WsgiToAsgi

_module, _, _attribute = os.environ["LAB_BRIDGED_APP"].partition(":")
_wsgi = WsgiToAsgi(getattr(importlib.import_module(_module), _attribute))


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "lifespan":
        return await _wsgi(scope, receive, send)
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
