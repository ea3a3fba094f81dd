"""A production-shaped Flask app the lab's tests bring through `lab run --app`, as a user would.

Why it looks like this: it is the shape that stopped real apps at the door. It is built by a
factory (`shop:create_app('lab', pool_size=3)`), reads its settings from the environment
(DATABASE_URL, PAYMENTS_API) and from a file relative to its own directory (settings.json), opens
a SQLAlchemy engine to PostgreSQL and connects while it is built, and calls a payment API at a
path of its own. Each build appends its process id and the orders it found to var/built.log
(relative too), so a test can count how many times, in which processes and on what data the
factory ran.
"""

import json
import os
import urllib.request
from pathlib import Path

from flask import Blueprint, Flask, abort, current_app, jsonify
from sqlalchemy import create_engine, text

shop = Blueprint("shop", __name__)


def create_app(mode="production", pool_size=5, max_overflow=10):
    settings = json.loads(Path("settings.json").read_text())
    url = os.environ["DATABASE_URL"]
    if os.environ.get("DB_DRIVER"):  # SQLAlchemy's dialect+driver, as in production settings
        url = url.replace("postgresql://", f"postgresql+{os.environ['DB_DRIVER']}://", 1)
    engine = create_engine(url, pool_size=pool_size, max_overflow=max_overflow)
    with engine.connect() as conn:  # connects as it starts, as many production apps do
        conn.execute(text("SELECT 1"))
    Path("var").mkdir(exist_ok=True)
    with open("var/built.log", "a") as log:
        log.write(f"{os.getpid()} {mode} orders={count_orders(engine)}\n")
    app = Flask(__name__)
    app.config.update(settings, MODE=mode, ENGINE=engine, BUILT_IN=os.getpid())
    app.config["PAYMENTS_API"] = os.environ.get("PAYMENTS_API", "")
    app.register_blueprint(shop)
    return app


def count_orders(engine):
    """The orders in the database, -1 where it has no such table (no schema loaded)."""
    try:
        with engine.connect() as conn:
            return conn.execute(text("SELECT count(*) FROM orders")).scalar()
    except Exception:
        return -1


def broken_factory():
    raise RuntimeError("SECRET_KEY is not set")


@shop.get("/health")
def health():
    return "ok"


@shop.get("/built")
def built():
    """500 unless the app serving this request was built in this very process."""
    if current_app.config["BUILT_IN"] != os.getpid():
        abort(500)
    return jsonify(mode=current_app.config["MODE"], greeting=current_app.config["greeting"])


@shop.get("/fresh")
def fresh():
    """500 once this database holds more orders than one model's check makes (two): the
    models' checks then shared their data."""
    if count_orders(current_app.config["ENGINE"]) > 2:
        abort(500)
    return "fresh"


@shop.get("/slow")
def slow():
    """A report that waits 100 ms in PostgreSQL, holding one of the pool's connections."""
    with current_app.config["ENGINE"].connect() as conn:
        conn.execute(text("SELECT pg_sleep(0.1)"))
    return "done"


@shop.get("/report")
def report():
    """A report that waits 50 ms in PostgreSQL, holding one of the pool's connections."""
    with current_app.config["ENGINE"].connect() as conn:
        conn.execute(text("SELECT pg_sleep(0.05)"))
    return "done"


@shop.get("/items/<int:item_id>")
def item(item_id):
    with current_app.config["ENGINE"].connect() as conn:
        row = conn.execute(text("SELECT name FROM items WHERE id = :id"), {"id": item_id}).first()
    if row is None:
        abort(404)
    return jsonify(id=item_id, name=row.name)


@shop.get("/quote")
def quote():
    """Two calls to the payment API per request: a rate, then a quote."""
    api = current_app.config["PAYMENTS_API"]
    with urllib.request.urlopen(api + "/v1/rates/eur") as reply:
        rate = json.loads(reply.read() or b"{}")
    request = urllib.request.Request(api + "/v1/quotes", b"{}", method="POST")
    with urllib.request.urlopen(request) as reply:
        return jsonify(rate=rate, quote=json.loads(reply.read() or b"{}"))


@shop.post("/checkout")
def checkout():
    """Writes an order, then charges it through the payment API (PAYMENTS_API/v1/charges)."""
    with current_app.config["ENGINE"].begin() as conn:
        conn.execute(text("INSERT INTO orders (item_id) VALUES (1)"))
    url = current_app.config["PAYMENTS_API"] + "/v1/charges"
    with urllib.request.urlopen(urllib.request.Request(url, b"{}", method="POST")) as reply:
        charged = json.loads(reply.read() or b"{}")
    return jsonify(charged=charged)
