"""The test servers' ports cannot be taken by an outgoing connection while their server is down."""

from __future__ import annotations

import socket

from tests.support.ports import ephemeral_range, free_port


def test_a_free_port_lies_outside_the_range_outgoing_connections_use() -> None:
    first, last = ephemeral_range()
    ports = {free_port() for _ in range(50)}
    assert not [port for port in ports if first <= port <= last]
    assert len(ports) > 40  # chosen at random, not one port over and over


def test_a_free_port_can_be_listened_on_and_again_after_a_client_came_and_went() -> None:
    port = free_port()
    for _ in range(2):  # a restarted server listens on the same port again
        with socket.socket() as server:
            server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            server.bind(("127.0.0.1", port))
            server.listen()
            with socket.create_connection(("127.0.0.1", port)) as client:
                first, last = ephemeral_range()
                assert first <= client.getsockname()[1] <= last  # the kernel's, not ours
                server.accept()[0].close()


def test_the_range_is_read_from_the_kernel() -> None:
    first, last = ephemeral_range()
    assert 1024 <= first <= last <= 65_535
