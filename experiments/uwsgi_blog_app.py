"""The Flask app of `uwsgi-blog`: one endpoint that sleeps (1 s in the blog), one health check.

`from time import sleep` sits at module level on purpose (BLOG_IMPORT=module, the default): if
gevent patches after this module is imported (uWSGI's --gevent-monkey-patch), `sleep` here is
still the blocking original and every request serialises the worker. BLOG_IMPORT=view looks
`time.sleep` up at call time, as code that imports inside the view does, so a late patch works.
"""

import os
import time
from time import sleep

from flask import Flask

SLEEP_S = float(os.environ.get("BLOG_SLEEP_S", "1"))
LOOKUP_IN_VIEW = os.environ.get("BLOG_IMPORT", "module") == "view"

app = Flask(__name__)


@app.route("/")
def index() -> str:
    (time.sleep if LOOKUP_IN_VIEW else sleep)(SLEEP_S)
    return "Hello, World!"


@app.route("/health")
def health() -> str:
    return "ok"
