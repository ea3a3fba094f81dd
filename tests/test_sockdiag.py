"""The tree's connected sockets from sock_diag: the same sockets psutil's slow reading finds, and
none that has no far end, whatever the machine's TIME_WAIT table holds."""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lab.system import outbound, sockdiag

LOOPBACKS = {socket.AF_INET: "127.0.0.1", socket.AF_INET6: "::1"}


@contextlib.contextmanager
def listener(family: int = socket.AF_INET) -> Iterator[socket.socket]:
    with socket.socket(family, socket.SOCK_STREAM) as srv:
        srv.bind((LOOPBACKS[family], 0))
        srv.listen(64)
        yield srv


def pairs(srv: socket.socket, n: int, stack: contextlib.ExitStack) -> list[socket.socket]:
    """n connections to srv, both ends kept open by the stack."""
    clients = []
    for _ in range(n):
        client = stack.enter_context(socket.create_connection(srv.getsockname()[:2]))
        stack.enter_context(srv.accept()[0])
        clients.append(client)
    return clients


def time_waits(n: int) -> None:
    """n loopback connections closed client first: n sockets in TIME_WAIT for a minute."""
    with listener() as srv:
        for _ in range(n):
            with socket.create_connection(srv.getsockname()) as client:
                server_end, _ = srv.accept()
            server_end.close()
            assert client.fileno() == -1


def mine(port: int) -> set[sockdiag.Connection]:
    return {c for c in sockdiag.connections(os.getpid()) if port in (c.local[1], c.remote[1])}


@pytest.mark.parametrize("family", [socket.AF_INET, socket.AF_INET6], ids=["ipv4", "ipv6"])
def test_each_end_of_a_connection_is_found_and_a_listener_is_not(family: int) -> None:
    with listener(family) as srv, contextlib.ExitStack() as stack:
        port = srv.getsockname()[1]
        (client,) = pairs(srv, 1, stack)
        found = mine(port)
        near = client.getsockname()[:2]
        assert sockdiag.Connection("tcp", near, (LOOPBACKS[family], port)) in found
        assert sockdiag.Connection("tcp", (LOOPBACKS[family], port), near) in found
        assert len(found) == 2  # the listening socket has no far end


def test_the_same_sockets_as_psutil_reads_and_no_time_wait() -> None:
    time_waits(50)
    with listener() as srv, contextlib.ExitStack() as stack:
        port = srv.getsockname()[1]
        pairs(srv, 3, stack)
        udp = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_DGRAM))
        udp.connect(("127.0.0.1", port))  # a connected UDP socket has a far end
        slow = set(sockdiag._psutil_connections(os.getpid()))
        fast = set(sockdiag.connections(os.getpid()))
        assert fast == slow, fast ^ slow
        assert sockdiag.Connection("udp", udp.getsockname(), ("127.0.0.1", port)) in fast


@settings(max_examples=10, deadline=None)
@given(held=st.integers(0, 12), closed=st.integers(0, 12))
def test_held_counts_the_open_connections_to_a_port_never_the_closed(
    held: int, closed: int
) -> None:
    """Whatever mix of open and just-closed connections: the count is the open ones."""
    with listener() as srv, contextlib.ExitStack() as stack:
        port = srv.getsockname()[1]
        pairs(srv, held, stack)
        with contextlib.ExitStack() as gone:
            pairs(srv, closed, gone)
        assert outbound.held(os.getpid(), {port: "postgres"}) == {"postgres": held}


def test_a_process_that_is_gone_holds_nothing() -> None:
    assert sockdiag.connections(2**22 + 1) == []
