"""The ZooKeeper handler's kept selectors (``ha/drivers/zookeeper/selecting.py``): they answer
as kazoo's own select does, on real sockets, and keep one epoll descriptor per shape."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable, Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kazoo.handlers.utils import selector_select

from ha.drivers.zookeeper.handler import InlineHandler
from ha.drivers.zookeeper.selecting import KEPT, KeptSelectors


def epolls() -> int:
    """The epoll descriptors this process holds open."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:[eventpoll]"
        except OSError:
            pass  # the listing's own descriptor, gone
    return count


@pytest.fixture
def pairs() -> Iterator[list[tuple[socket.socket, socket.socket]]]:
    made = [socket.socketpair() for _ in range(3)]
    yield made
    for a, b in made:
        a.close()
        b.close()


def answer(result: tuple[list[object], list[object], list[object]]) -> list[list[int]]:
    return [sorted(map(id, part)) for part in result]


@settings(max_examples=60, deadline=None)
@given(
    steps=st.lists(
        st.tuples(
            st.sets(st.integers(0, 2)),  # which sockets have bytes waiting
            st.lists(st.integers(0, 2), max_size=3),  # asked to read
            st.lists(st.integers(0, 2), max_size=3),  # asked to write
        ),
        min_size=1,
        max_size=12,
    )
)
def test_it_answers_as_kazoos_select_does(
    steps: list[tuple[set[int], list[int], list[int]]],
) -> None:
    made = [socket.socketpair() for _ in range(3)]
    kept = KeptSelectors()
    try:
        for waiting, read, write in steps:
            for i, (ours, peer) in enumerate(made):
                ours.setblocking(False)
                try:
                    while ours.recv(4096):
                        pass
                except BlockingIOError:
                    pass
                if i in waiting:
                    peer.send(b"x")
            rlist = [made[i][0] for i in read]
            wlist = [made[i][0] for i in write]
            theirs = selector_select(rlist, wlist, [], 0)
            assert answer(kept.select(rlist, wlist, [], 0)) == answer(theirs)
    finally:
        kept.close()
        for a, b in made:
            a.close()
            b.close()


def test_a_shape_keeps_one_selector_until_the_handler_stops(
    pairs: list[tuple[socket.socket, socket.socket]],
) -> None:
    # kazoo's handler made and closed an epoll descriptor for every select: none was left
    handler = InlineHandler()
    (ours, peer), (wake, _) = pairs[0], pairs[1]
    before = epolls()
    for _ in range(50):
        assert handler.select([ours, wake], [], [], 0) == ([], [], [])
        assert handler.select([], [ours], [], 0) == ([], [ours], [])
        peer.send(b"x")
        assert handler.select([ours], [], [], 0) == ([ours], [], [])
        ours.recv(1)
    assert epolls() == before + 3
    handler.start()
    handler.stop()
    assert epolls() == before


def reused(ask: Callable[[socket.socket], object]) -> None:
    """Select on a socket (as ``ask`` names it), close it, open another on its descriptor with
    a byte waiting: the same select must see it."""
    kept = KeptSelectors()
    old, old_peer = socket.socketpair()
    fd = old.fileno()
    assert kept.select([ask(old)], [], [], 0) == ([], [], [])
    old.close()
    old_peer.close()
    new, new_peer = socket.socketpair()
    try:
        if new.fileno() != fd:  # the kernel gives the lowest free number: it is the old one's
            pytest.skip(f"the new socket did not get descriptor {fd} (got {new.fileno()})")
        new_peer.send(b"x")
        assert kept.select([ask(new)], [], [], 1.0) == ([ask(new)], [], [])
        with pytest.raises(TypeError):  # as kazoo's: a closed socket has no descriptor
            kept.select([old], [], [], 0)
    finally:
        kept.close()
        new.close()
        new_peer.close()


def test_a_new_socket_on_a_closed_ones_descriptor_is_watched(
    pairs: list[tuple[socket.socket, socket.socket]],
) -> None:
    reused(lambda sock: sock)  # another object: another shape


def test_a_number_reused_by_a_new_socket_is_watched(
    pairs: list[tuple[socket.socket, socket.socket]],
) -> None:
    # a number stays the same from one file to the next: it cannot name a kept selector
    reused(lambda sock: sock.fileno())


def test_past_the_kept_shapes_the_oldest_is_closed(
    pairs: list[tuple[socket.socket, socket.socket]],
) -> None:
    kept = KeptSelectors()
    before = epolls()
    extra = [socket.socketpair() for _ in range(KEPT + 2)]
    try:
        for ours, _ in extra:
            kept.select([ours], [], [], 0)
        assert epolls() == before + KEPT
    finally:
        kept.close()
        for a, b in extra:
            a.close()
            b.close()
    assert epolls() == before


def test_two_threads_waiting_on_one_shape_each_get_their_answer(
    pairs: list[tuple[socket.socket, socket.socket]],
) -> None:
    kept = KeptSelectors()
    ours, peer = pairs[0]
    answers: list[tuple[list[object], list[object], list[object]]] = []
    waiting = threading.Thread(target=lambda: answers.append(kept.select([ours], [], [], 5.0)))
    waiting.start()
    assert kept.select([ours], [], [], 0.05) == ([], [], [])  # the other waits still
    peer.send(b"x")
    waiting.join(5.0)
    assert answers == [([ours], [], [])]
    kept.close()


def test_bad_arguments_are_refused_as_kazoo_refuses_them(
    pairs: list[tuple[socket.socket, socket.socket]],
) -> None:
    kept = KeptSelectors()
    ours, _ = pairs[0]
    for bad in (-1.0, "1"):
        with pytest.raises(Exception) as theirs:
            selector_select([ours], [], [], bad)
        with pytest.raises(type(theirs.value)):
            kept.select([ours], [], [], bad)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        kept.select([object()], [], [], 0)
    kept.close()


def test_selects_after_the_handler_stops_keep_nothing(
    pairs: list[tuple[socket.socket, socket.socket]],
) -> None:
    # kazoo stops its handler, then its connection thread sends the close request and reads
    # the reply: those selects must not leave epoll descriptors behind
    handler = InlineHandler()
    handler.start()
    (ours, peer), (wake, _) = pairs[0], pairs[1]
    before = epolls()
    handler.select([ours, wake], [], [], 0)
    handler.stop()
    assert epolls() == before
    peer.send(b"x")
    assert handler.select([], [ours], [], 0) == ([], [ours], [])
    assert handler.select([ours], [], [], 0) == ([ours], [], [])
    assert epolls() == before
    handler.start()  # kept again
    handler.select([ours], [], [], 0)
    assert epolls() == before + 1
    handler.stop()
    assert epolls() == before
