"""`python -m djauth.setup`: the project's tables in LOGIN_DB and its one user, alice/secret."""

import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "djauth.settings")
django.setup()

from django.contrib.auth.models import User  # noqa: E402
from django.core.management import call_command  # noqa: E402

call_command("migrate", verbosity=0)
User.objects.create_user("alice", password="secret")
