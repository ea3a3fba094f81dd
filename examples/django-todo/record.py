"""How `access.log` and `session.har` beside this file were made, so anyone can make them again.

The site is served by gunicorn, whose access log is the combined format nginx writes, on a
PostgreSQL the lab starts (the same server `lab run` starts), with django-todo's migrations and
`seed.py` run first. A real browser (Debian's chromium, driven by Playwright) then signs in and
reads the site as a user would: the lists, the groceries list, some of its tasks, a search, and
marks one task done; Playwright records every request into a HAR as the browser's developer tools
would ("Save all as HAR"). The browser also asks for the stylesheets and scripts the pages name,
which the site does not serve (DEBUG off, no static files collected): the lab leaves those out of
a mix, and says so.

    .venv/bin/python examples/django-todo/record.py    # about a minute; rewrites both files
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from playwright.sync_api import Page, sync_playwright

from lab.backends import databases
from lab.system import procs

SITE = Path(__file__).resolve().parent
# What the user reads, in order; the list's and the tasks' ids are the seed's (list 1, tasks 1-10).
READS = ["/todo/", "/todo/1/groceries/", "/todo/task/3/", "/todo/1/groceries/", "/todo/task/7/"]
READS += ["/todo/", "/todo/1/groceries/", "/todo/task/1/", "/todo/mine/", "/todo/"]
MARK_DONE = """token => fetch("/todo/toggle_done/5/",
    {method: "POST", headers: {"X-CSRFToken": token}})"""


@contextmanager
def served(run_dir: Path) -> Iterator[str]:
    """The site on gunicorn over a fresh PostgreSQL with django-todo's tables and the seed: its
    base URL, while the block runs."""
    db = databases.start_postgres(run_dir)
    env = {**os.environ, "DATABASE_URL": db.url, "DJANGO_SETTINGS_MODULE": "todosite.settings"}
    port = procs.free_port()
    server = None
    try:
        for setup in (["manage.py", "migrate", "-v0"], ["seed.py"]):
            subprocess.run([sys.executable, *setup], cwd=SITE, env=env, check=True)
        argv = [sys.executable, "-m", "gunicorn", "todosite.wsgi:application"]
        argv += ["-b", f"127.0.0.1:{port}", "--access-logfile", str(run_dir / "access.log")]
        server = subprocess.Popen(argv, cwd=SITE, env=env)
        yield _ready(f"http://127.0.0.1:{port}", server)
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=30)
        databases.stop(db)


def _ready(base: str, server: subprocess.Popen[bytes]) -> str:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and server.poll() is None:
        try:
            with urllib.request.urlopen(f"{base}/health/", timeout=1):
                return base
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"record: the site did not answer {base}/health/ within 30 s")


def browse(page: Page, base: str) -> None:
    """Sign in through Django's login form, read the pages, search, mark a task done."""
    page.goto(f"{base}/login/?next=/todo/")
    page.fill("input[name=username]", "lab")
    page.fill("input[name=password]", "lab")
    page.click("button")
    page.wait_for_url(f"{base}/todo/")
    for path in READS:
        page.goto(f"{base}{path}")
    for query in ("task 3", "note", "task"):
        page.goto(f"{base}/todo/search/?q={query.replace(' ', '+')}")
    page.goto(f"{base}/todo/1/groceries/")
    # marks task 5 done as a page's script would: the CSRF token from the cookie, in a header
    page.evaluate(MARK_DONE, _csrf(page))
    page.goto(f"{base}/todo/1/groceries/")


def _csrf(page: Page) -> str:
    return next(c["value"] for c in page.context.cookies() if c["name"] == "csrftoken")


def main() -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("record: needs Debian's chromium (apt-get install chromium)")
    run_dir = Path(tempfile.mkdtemp(prefix="lab-record-"))
    with served(run_dir) as base, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium)
        har = str(SITE / "session.har")  # the answers' bodies left out: the mix needs none
        context = browser.new_context(record_har_path=har, record_har_content="omit")
        browse(context.new_page(), base)
        context.close()  # writes the HAR
        browser.close()
    shutil.copy(run_dir / "access.log", SITE / "access.log")
    shutil.rmtree(run_dir, ignore_errors=True)
    print(f"record: wrote {SITE / 'access.log'} and {SITE / 'session.har'}")


if __name__ == "__main__":
    main()
