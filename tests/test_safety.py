"""Loopback only unless allowed: which hosts count as loopback, and URLs checked before any load."""

from __future__ import annotations

import pytest

from lab.record.errors import LabError
from lab.system import safety


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.5.6.7", True),
        ("localhost", True),
        ("::1", True),
        ("[::1]", True),
        ("0.0.0.0", False),
        ("10.0.0.1", False),
        ("192.168.1.1", False),
        ("::", False),
        ("8.8.8.8", False),
    ],
    ids=lambda v: str(v),
)
def test_loopback_detection(host, loopback):
    assert safety.is_loopback(host) is loopback


def test_urls_are_checked_before_any_load():
    safety.check_url("http://127.0.0.1:8000", "server", allow_remote=False)
    safety.check_url("http://lab-server:8000", "server", allow_remote=False, trusted=["lab-server"])
    for bad in ("http://10.0.0.1:80", "ftp://127.0.0.1", "http://:80"):
        with pytest.raises(LabError):
            safety.check_url(bad, "server", allow_remote=False)
