"""A Flask app behind a login, as production ones are: Flask-Login's session cookie, and a
Flask-WTF-style CSRF token (a hidden `csrf_token` input of the login form, kept in the session,
checked on every write as a form field or an `X-CSRFToken` header; written here by hand, Flask-WTF
is not a dependency of the lab). `/seen` says how many distinct sessions (and users) its logged-in
routes saw. Its accounts: alice, and user0, user1, ... (one per simulated user), password `secret`.
"""

from __future__ import annotations

import secrets
from collections import Counter

from flask import Flask, abort, redirect, request, session
from flask_login import LoginManager, UserMixin, current_user, login_required, login_user

app = Flask(__name__)
app.secret_key = "concurrency-lab-login-test"
manager = LoginManager(app)
SEEN: set[str] = set()  # the sessions (one per login) its logged-in routes saw
USERS: Counter[str] = Counter()  # the requests each user made, logged in


class User(UserMixin):
    def __init__(self, uid: str) -> None:
        self.id = uid


@manager.user_loader
def load_user(uid: str) -> User:
    return User(uid)


@app.before_request
def csrf_protect() -> None:
    if request.method != "GET":
        token = request.form.get("csrf_token") or request.headers.get("X-CSRFToken")
        if not token or token != session.get("csrf_token"):
            abort(400, "The CSRF token is missing.")


@app.get("/health")
def health() -> str:
    return "ok"


@app.get("/login")
def login_form() -> str:
    token = session.setdefault("csrf_token", secrets.token_hex(16))
    return (
        "<!doctype html><html><head><title>Sign in</title></head><body>"
        f'<form method="post"><input type="hidden" name="csrf_token" value="{token}">'
        '<input name="username"><input name="password" type="password"></form></body></html>'
    )


@app.post("/login")
def login() -> object:
    name = request.form.get("username", "")
    known = name == "alice" or (name.startswith("user") and name[4:].isdigit())
    if known and request.form.get("password") == "secret":
        login_user(User(name))
        session["sid"] = secrets.token_hex(8)
        return redirect("/me")
    return "Invalid username or password\n", 401


@app.get("/me")
@login_required
def me() -> dict[str, str]:
    SEEN.add(session["sid"])
    USERS[current_user.id] += 1
    return {"user": current_user.id}


@app.post("/notes")
@login_required
def notes() -> tuple[dict[str, bool], int]:
    SEEN.add(session["sid"])
    USERS[current_user.id] += 1
    return {"saved": True}, 201


@app.get("/seen")
def seen() -> dict[str, object]:
    return {"sessions": len(SEEN), "users": dict(USERS)}
