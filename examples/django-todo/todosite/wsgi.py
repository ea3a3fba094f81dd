"""The WSGI app the lab serves: --app todosite.wsgi:application."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "todosite.settings")
application = get_wsgi_application()
