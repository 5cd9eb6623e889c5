"""What the contract suite records of a driver: its contact (connection states) and its events."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from ha.drivers.base import (
    ConnectionEvent,
    ConnectionState,
    Driver,
)
from ha.testing import faults

S = ConnectionState


WAIT = 15.0  # seconds an awaited event may take before the test fails (a hang guard)


class Events:
    """A subscriber that keeps every event and lets a test wait for the next ones."""

    def __init__(self) -> None:
        self.events: list[Any] = []
        self.threads: set[int] = set()
        self._read = 0
        self._changed = anyio.Event()

    def __call__(self, event: Any) -> None:
        self.events.append(event)
        self.threads.add(threading.get_ident())
        self._changed.set()

    async def next(self) -> Any:
        with anyio.fail_after(WAIT):
            while self._read >= len(self.events):
                self._changed = anyio.Event()
                await self._changed.wait()
        self._read += 1
        return self.events[self._read - 1]

    async def state(self) -> ConnectionEvent:
        """The next connection event other than DISCONNECTED (which a backend may add)."""
        while (event := await self.next()).state is S.DISCONNECTED:
            pass
        assert isinstance(event, ConnectionEvent)
        return event

    def pending(self) -> list[Any]:
        return self.events[self._read :]


class Contact:
    """Contact between one driver and its backend, lost and regained.

    ``ha.testing.faults`` does it, but for sqlite, which has no connection: there the file
    stalls (``freeze``: no renewal, no contact), or another connection holds its write lock
    (renewals fail, noticed as DISCONNECTED, while the lease lives on).
    """

    def __init__(self, backend: Any) -> None:
        self.sqlite = backend.name == "sqlite"
        self.stallers: list[sqlite3.Connection] = []

    def cut(self, driver: Driver) -> None:
        """From now on the driver makes no contact; its session ages on the backend."""
        (faults(driver).freeze if self.sqlite else faults(driver).disconnect)()

    def restore(self, driver: Driver) -> None:
        (faults(driver).thaw if self.sqlite else faults(driver).reconnect)()

    async def drop(self, driver: Any) -> None:
        """Contact is lost and the driver notices (DISCONNECTED) until ``back``."""
        if not self.sqlite:
            faults(driver).disconnect()
            return
        conn = sqlite3.connect(driver.path, isolation_level=None, check_same_thread=False)
        self.stallers.append(conn)
        await anyio.to_thread.run_sync(conn.execute, "BEGIN IMMEDIATE")

    async def back(self, driver: Driver) -> None:
        if not self.sqlite:
            faults(driver).reconnect()
        while self.stallers:
            await anyio.to_thread.run_sync(self.stallers.pop().close)  # rolls back


@pytest.fixture
def contact(backend: Any) -> Iterator[Contact]:
    c = Contact(backend)
    yield c
    for conn in c.stallers:
        conn.close()
