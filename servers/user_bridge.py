"""A declared bridge: a user's WSGI app (LAB_BRIDGED_APP="module:attribute") behind asgiref.

It lets a WSGI app run under an asyncio server, but WsgiToAsgi runs each worker's requests on one
thread, one at a time; the lab flags every model that serves through it as `bridged`.
"""

import importlib
import os

from asgiref.wsgi import WsgiToAsgi

_module, _, _attribute = os.environ["LAB_BRIDGED_APP"].partition(":")
app = WsgiToAsgi(getattr(importlib.import_module(_module), _attribute))
