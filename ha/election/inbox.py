"""The elector's inputs in arrival order: put from driver callbacks (never blocks), taken by its
one loop.

An idle elector is mostly its wait here, so the wait is kept small: one ``anyio.Event`` while
the queue is empty, and nothing else. An anyio memory object stream did the same job for
about 4.5 KB per elector: its state, two ends and, while waiting, an event, a receiver record and
the ``WouldBlock`` it awaits inside, with that exception's traceback
(``benchmarks/elector_memory.py``).

The reader takes inputs with ``get_nowait`` and, when there is none, waits on ``arrival()``
itself (an awaited helper would add its frame to every idle elector). A cancelled wait loses
nothing: an input leaves the queue only when ``get_nowait`` returns it.
"""

from __future__ import annotations

from typing import Generic, TypeVar

import anyio

__all__ = ("Inbox",)

T = TypeVar("T")

_COMPACT = 64  # taken inputs kept at the list's head before it is cut (a burst drains in O(n))


class Inbox(Generic[T]):
    __slots__ = ("_items", "_head", "_waiter", "_closed")

    def __init__(self) -> None:
        self._items: list[T] = []
        self._head = 0  # the next input to take; those before it were taken
        self._waiter: anyio.Event | None = None
        self._closed = False

    def put(self, item: T) -> None:
        """Queue ``item`` and wake the reader; after ``close()``, drop it (the run is ending)."""
        if self._closed:
            return
        self._items.append(item)
        if self._waiter is not None:
            self._waiter.set()
            self._waiter = None

    def waiting(self) -> int:
        """How many inputs are queued."""
        return len(self._items) - self._head

    def get_nowait(self) -> T | None:
        """The oldest input, or None if there is none."""
        items, head = self._items, self._head
        if head == len(items):
            return None
        item = items[head]
        head += 1
        if head == len(items):
            items.clear()
            head = 0
        elif head >= _COMPACT and 2 * head >= len(items):
            del items[:head]
            head = 0
        self._head = head
        return item

    def arrival(self) -> anyio.Event:
        """An event set by the next ``put`` (set already if an input is queued), or by
        ``close``. Its ``wait`` is a checkpoint, as a stream's ``receive`` is. Raises
        ``EndOfStream`` once closed."""
        if self._closed:
            raise anyio.EndOfStream
        if self._head < len(self._items):
            queued = anyio.Event()
            queued.set()
            return queued
        if self._waiter is None:
            self._waiter = anyio.Event()
        return self._waiter

    def close(self) -> None:
        """Drop what is queued and refuse what comes; a waiting reader wakes, and its next
        ``arrival()`` raises EndOfStream."""
        self._closed = True
        self._items.clear()
        self._head = 0
        if self._waiter is not None:
            self._waiter.set()
            self._waiter = None
