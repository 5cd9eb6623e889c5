"""The driver's registry of subscriptions (``Driver.subscribe`` in ``drivers/base.py``).

A path with one subscriber holds that subscription alone, with several a dict of them in order
(issue 31: a dict per path cost ~230 B, and an idle standby watches four paths). The registry
must still deliver each event to every open subscription of its path in subscribing order, and
start a path's backend watch with its first subscriber and stop it with its last.
"""

from __future__ import annotations

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ha.drivers.base import (
    Callback,
    ConnectionEvent,
    ConnectionState,
    NodeEvent,
    NodeEventKind,
    Subscription,
)
from ha.drivers.memory import MemoryDriver

PATHS = (None, "/a", "/a/b", "/c")
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("subscribe"), st.sampled_from(PATHS)),
        st.tuples(st.just("close"), st.integers(0, 40)),
        st.tuples(st.just("emit"), st.sampled_from(PATHS)),
    ),
    max_size=60,
)


class Recording(MemoryDriver):
    """Records the backend watch hooks as the registry calls them."""

    def __init__(self) -> None:
        super().__init__("subscriptions")
        self.hooks: list[tuple[str, str]] = []

    def _watch_started(self, path: str) -> None:
        self.hooks.append(("started", path))
        super()._watch_started(path)

    def _watch_stopped(self, path: str) -> None:
        self.hooks.append(("stopped", path))
        super()._watch_stopped(path)


def _event(path: str | None) -> NodeEvent | ConnectionEvent:
    if path is None:
        return ConnectionEvent(ConnectionState.CONNECTED, 1)
    return NodeEvent(path, NodeEventKind.CHANGED)


LOOPS = pytest.mark.parametrize("loop", ["asyncio", "trio"])


@LOOPS
@settings(max_examples=150, deadline=None)
@given(ops=OPS)
def test_the_registry_delivers_to_the_open_subscriptions_in_order(
    ops: list[tuple[str, object]], loop: str
) -> None:
    async def body() -> None:
        driver = Recording()
        got: list[int] = []
        made: list[tuple[Subscription, str | None]] = []  # (subscription, path), in that order
        open_: list[int] = []  # indexes into made, still open
        hooks: list[tuple[str, str]] = []

        def recorder(n: int) -> Callback:
            return lambda _event: got.append(n)

        for op, arg in ops:
            if op == "subscribe":
                path = arg if arg is None else str(arg)
                n = len(made)
                if path is not None and not any(made[i][1] == path for i in open_):
                    hooks.append(("started", path))
                made.append((driver.subscribe(path, recorder(n)), path))
                open_.append(n)
            elif op == "close" and made:
                n = int(arg) % len(made)  # type: ignore[call-overload]
                sub, path = made[n]
                if n in open_:
                    open_.remove(n)
                    if path is not None and not any(made[i][1] == path for i in open_):
                        hooks.append(("stopped", path))
                sub.close()  # twice is a no-op
            elif op == "emit":
                path = arg if arg is None else str(arg)
                got.clear()
                driver._emit(_event(path))
                assert got == [i for i in open_ if made[i][1] == path]
        assert driver.hooks == hooks
        assert sorted(driver.watched_paths()) == sorted(
            {str(made[i][1]) for i in open_ if made[i][1] is not None}
        )

    anyio.run(body, backend=loop)


@LOOPS
def test_a_subscriber_closed_by_an_earlier_one_still_gets_the_event_being_delivered(
    loop: str,
) -> None:
    """Delivery works on the subscribers as they were when the event came (as before)."""

    async def body() -> None:
        driver = Recording()
        got: list[str] = []
        second = None

        def first(_e: object) -> None:
            got.append("first")
            assert second is not None
            second.close()

        driver.subscribe("/a", first)
        second = driver.subscribe("/a", lambda _e: got.append("second"))
        driver._emit(_event("/a"))
        driver._emit(_event("/a"))
        assert got == ["first", "second", "first"]

    anyio.run(body, backend=loop)
