"""A user's app built by its factory (`lab run --app 'pkg:create_app()'`), as production builds it.

Why: a production Flask (or Starlette, FastAPI) app is rarely a module-level object; it is made
by a factory that reads its settings, opens its pools and registers its blueprints. gunicorn takes
`'pkg:create_app()'`, uvicorn and Granian a `--factory` flag, uWSGI nothing: so every model is
given this one module instead, and it calls the factory once in each server process as it imports
(uWSGI gets `lazy-apps` through its environment, so its workers build the app after the fork, not
its master before it). LAB_APP_FACTORY names the factory (`module:attribute`),
LAB_APP_FACTORY_ARGS its literal arguments as the lab parsed and checked them (`repr((args,
kwargs))`). The WSGI-to-ASGI bridge imports `app` from here when the app is built by a factory.
"""

import ast
import importlib
import os


def build() -> object:
    """The app the factory returns, called with the arguments the user gave."""
    module, _, name = os.environ["LAB_APP_FACTORY"].partition(":")
    args, kwargs = ast.literal_eval(os.environ.get("LAB_APP_FACTORY_ARGS", "((), {})"))
    return getattr(importlib.import_module(module), name)(*args, **kwargs)


app = build()
