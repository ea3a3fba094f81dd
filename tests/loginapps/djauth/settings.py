"""A Django project behind a login: its own session, CSRF and auth middleware, SQLite in
LOGIN_DB (made by `djauth.setup`), a fast password hasher (tests log in many times)."""

import os
from pathlib import Path

SECRET_KEY = "concurrency-lab-login-test"
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
INSTALLED_APPS = ["django.contrib.auth", "django.contrib.contenttypes", "django.contrib.sessions"]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
]
ROOT_URLCONF = "djauth.urls"
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("LOGIN_DB", "login.sqlite3"),
        "OPTIONS": {"timeout": 20},
    }
}
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [Path(__file__).parent / "templates"],
    }
]
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/me/"
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"
