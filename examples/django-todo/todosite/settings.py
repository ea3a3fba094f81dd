"""Settings from the environment, as in production: DATABASE_URL names the PostgreSQL (the lab
gives it {postgres_url}); connections are kept between requests (CONN_MAX_AGE), as a
production site keeps them, so a request does not pay for a new connection."""

import os
from pathlib import Path
from urllib.parse import unquote, urlsplit

BASE_DIR = Path(__file__).resolve().parent.parent
SECRET_KEY = "lab-worked-example-not-a-secret"
DEBUG = False
ALLOWED_HOSTS = ["*"]
INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.sites",
    "django.contrib.staticfiles",
    "todo",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
ROOT_URLCONF = "todosite.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
WSGI_APPLICATION = "todosite.wsgi.application"
_db = urlsplit(os.environ.get("DATABASE_URL", "postgresql://127.0.0.1:5432/todo"))
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": _db.path.lstrip("/"),
        "USER": unquote(_db.username or ""),
        "PASSWORD": unquote(_db.password or ""),
        "HOST": _db.hostname or "",
        "PORT": str(_db.port or ""),
        "CONN_MAX_AGE": 60,
    }
}
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"
SITE_ID = 1
STATIC_URL = "/static/"
LOGIN_URL = "/login/"
USE_TZ = True
# The example's one account signs in once per simulated user before each step (`lab run --login`),
# and logins are not measured. Django's default hasher (PBKDF2) spends a deliberate fraction of a
# second of CPU per login: 16 users signing in at once on one core then took seconds, overlapping
# the measured window. A fast hasher keeps the login phase inside the settle; never in production.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
