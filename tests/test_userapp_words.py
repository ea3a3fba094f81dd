"""The framework the answer names, read from the modules of the app's type's classes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lab.config.userapp import FRAMEWORKS, framework_of


@pytest.mark.parametrize(
    "modules,named",
    [
        (["flask.app", "flask.sansio.app", "builtins"], "Flask"),
        (["django.core.handlers.wsgi", "django.core.handlers.base", "builtins"], "Django"),
        (["mysite.app", "fastapi.applications", "starlette.applications", "builtins"], "FastAPI"),
        (["werkzeug.middleware.proxy_fix", "builtins"], ""),  # a middleware: no framework
        (["builtins"], ""),  # a plain function
        ([], ""),
    ],
    ids=["flask", "django", "subclass-of-fastapi", "middleware", "function", "nothing"],
)
def test_the_nearest_known_framework_is_named(modules: list[str], named: str) -> None:
    assert framework_of(modules) == named


names = st.from_regex(r"[a-z_][a-z0-9_]{0,8}(\.[a-z_][a-z0-9_]{0,8}){0,2}", fullmatch=True)


@given(st.lists(names | st.sampled_from(sorted(FRAMEWORKS)), max_size=6))
def test_a_named_framework_is_the_first_known_one_of_the_mro(modules: list[str]) -> None:
    """Whatever the MRO: the name is "" or a known framework's, and it is the first module of
    the MRO whose top-level package is one (a subclass of Flask in your code is Flask)."""
    known = [m for m in modules if m.partition(".")[0].lower() in FRAMEWORKS]
    named = framework_of(modules)
    assert named == (FRAMEWORKS[known[0].partition(".")[0].lower()] if known else "")
