"""The test servers' ports cannot be taken by an outgoing connection while their server is down."""

from __future__ import annotations

import socket

import pytest

from tests.support.ports import ephemeral_range, free_port, worker_share


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


def _few_ports_outside() -> bool:
    first, last = ephemeral_range()
    return (first - 10_000) + (65_535 - last) < 5_000


def test_a_process_never_hands_out_the_same_port_twice() -> None:
    if _few_ports_outside():
        pytest.skip("this kernel's ephemeral range leaves under 5,000 ports outside it")
    # an etcd cluster asks for nine ports before any member binds one
    ports = [free_port() for _ in range(2_000)]
    assert len(set(ports)) == len(ports)


def test_each_xdist_worker_draws_from_ports_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    drawn: dict[int, set[int]] = {}
    for index in range(3):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", f"gw{index}")
        monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "3")
        assert worker_share() == (index, 3)
        drawn[index] = {free_port() for _ in range(200)}
    assert not drawn[0] & drawn[1] and not drawn[1] & drawn[2] and not drawn[0] & drawn[2]
    assert all(port % 3 == index for index, ports in drawn.items() for port in ports)


def test_the_ports_are_drawn_from_both_sides_of_the_range_by_their_size() -> None:
    if _few_ports_outside():
        pytest.skip("this kernel's ephemeral range leaves under 5,000 ports outside it")
    first, last = ephemeral_range()
    below = sum(free_port() < first for _ in range(400))
    # 22,768 ports below the default range, 4,536 above: about 83% below, never half
    share_below = (first - 10_000) / ((first - 10_000) + (65_535 - last))
    assert abs(below / 400 - share_below) < 0.1
