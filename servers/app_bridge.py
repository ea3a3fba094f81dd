"""A known pitfall, kept to prove the lab catches it: the Flask app behind asgiref's WsgiToAsgi.

It looks like an asyncio server, but the bridge runs every request of a worker on one thread, so
requests are served one at a time. `servers/pitfalls.toml` declares it; the concurrency probe flags
it `serialized`.
"""

from asgiref.wsgi import WsgiToAsgi

from servers.app_wsgi import app as flask_app

app = WsgiToAsgi(flask_app)
