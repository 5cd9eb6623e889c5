"""The elector's inbox: inputs in arrival order, none lost to a cancelled wait, none taken after
the run ended, and an idle wait that holds little (issue 31: memory per idle elector)."""

from __future__ import annotations

import gc
import math
import tracemalloc
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio
import pytest
from anyio.abc import ObjectReceiveStream, ObjectSendStream

from ha.election.inbox import Inbox

pytestmark = pytest.mark.anyio

T = TypeVar("T")


async def _get(inbox: Inbox[T]) -> T:
    """What the elector's loop does: take an input, else wait for the next one."""
    while True:
        item = inbox.get_nowait()
        if item is not None:
            return item
        await inbox.arrival().wait()


async def test_inputs_come_out_in_the_order_they_were_put() -> None:
    inbox = Inbox[int]()
    for n in range(1000):  # a burst far past the compaction point
        inbox.put(n)
    taken = [await _get(inbox) for _ in range(600)]
    for n in range(1000, 1200):
        inbox.put(n)
    assert inbox.waiting() == 600
    while inbox.waiting():
        taken.append(await _get(inbox))
    assert taken == list(range(1200))
    assert inbox.get_nowait() is None


async def test_a_waiting_reader_is_woken_by_a_put() -> None:
    inbox = Inbox[str]()
    got: list[str] = []

    async def reader() -> None:
        got.append(await _get(inbox))

    async with anyio.create_task_group() as tg:
        tg.start_soon(reader)
        await anyio.wait_all_tasks_blocked()
        assert got == []
        inbox.put("input")
    assert got == ["input"]


async def test_a_cancelled_wait_loses_no_input() -> None:
    inbox = Inbox[str]()
    with anyio.move_on_after(0.01):
        await _get(inbox)
    inbox.put("first")
    with anyio.CancelScope() as scope:
        scope.cancel()
        await inbox.arrival().wait()  # a checkpoint: cancelled before anything is taken
    assert inbox.waiting() == 1
    assert await _get(inbox) == "first"


async def test_the_wait_is_a_checkpoint_even_with_an_input_waiting() -> None:
    inbox = Inbox[int]()
    inbox.put(1)
    arrival = inbox.arrival()
    assert arrival.is_set()  # nothing to wait for
    with anyio.CancelScope() as scope:
        scope.cancel()
        await arrival.wait()
        pytest.fail("the wait returned inside a cancelled scope")


async def test_after_close_inputs_are_dropped_and_a_waiting_reader_ends() -> None:
    inbox = Inbox[int]()
    ended: list[str] = []

    async def reader() -> None:
        try:
            await _get(inbox)
        except anyio.EndOfStream:
            ended.append("end")

    async with anyio.create_task_group() as tg:
        tg.start_soon(reader)
        await anyio.wait_all_tasks_blocked()
        inbox.put(1)
        inbox.close()  # in the same step as the put: the queued input is dropped too
    assert ended == ["end"]
    inbox.put(2)
    assert inbox.waiting() == 0


async def test_an_idle_wait_holds_little_more_than_a_bare_event() -> None:
    """A memory object stream held about 4.5 KB per waiting elector (its state, its ends, and
    the WouldBlock it waits inside, with its traceback); the inbox adds its list to the Event."""

    def inbox() -> Callable[[], Awaitable[object]]:
        return Inbox[int]().arrival().wait

    def event() -> Callable[[], Awaitable[object]]:
        return anyio.Event().wait

    def stream() -> Callable[[], Awaitable[object]]:
        send, receive = anyio.create_memory_object_stream[int](math.inf)
        ends.extend((send, receive))
        return receive.receive

    ends: list[ObjectSendStream[int] | ObjectReceiveStream[int]] = []
    held = {make.__name__: await _held_per_wait(make) for make in (event, inbox, stream)}
    for end in ends:
        end.close()
    assert held["inbox"] - held["event"] < 512, held
    assert held["stream"] > held["inbox"], held  # why it replaced the stream


async def _held_per_wait(make: Callable[[], Callable[[], Awaitable[object]]]) -> float:
    """Bytes held per task waiting on what ``make()`` returns (made while tracing)."""
    count = 300
    async with anyio.create_task_group() as tg:
        tg.start_soon(make())  # the first wait warms anyio's caches
        await anyio.wait_all_tasks_blocked()
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            for _ in range(count):
                tg.start_soon(make())
            await anyio.wait_all_tasks_blocked()
            gc.collect()
            held = (tracemalloc.get_traced_memory()[0] - before) / count
        finally:
            tracemalloc.stop()
        tg.cancel_scope.cancel()
    return held
