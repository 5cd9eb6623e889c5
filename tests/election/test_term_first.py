"""A new leader's work begins before its takeover's writes for the others (the announce).

After a takeover the elector writes for the contenders behind it (``Announce``: its node,
once; ``ClearCrumbs`` after fences); the work need not wait for those round trips, so the
elector lets the term's task enter ``become_active`` first. It yielded once and hoped: trio
runs the tasks ready together in a random order, so about every other takeover on trio sent
the announce before the work began (issue 31: 0.15-0.3 ms on the successor's share).
"""

from __future__ import annotations

import uuid

import anyio
import pytest

import ha
from ha.drivers.base import Stat
from ha.drivers.memory import MemoryCluster, MemoryDriver
from tests.support.harness import FAST

pytestmark = pytest.mark.anyio

COUNT = 16  # fifteen graceful takeovers, each with someone behind the new leader


class Writes(MemoryDriver):
    """Records the paths its callers write (``set``), as each call is made."""

    def __init__(self, name: str) -> None:
        super().__init__(name, session_timeout=2.0)
        self.written: list[str] = []

    async def set(self, path: str, data: bytes, version: int = -1) -> Stat:
        self.written.append(path)
        return await super().set(path, data, version)


class Notes:
    """On entering ``become_active``: whether its own node was written (announced) yet."""

    def __init__(self, driver: Writes, log: list[tuple[str, bool]]) -> None:
        self.driver = driver
        self.log = log
        self.active = anyio.Event()

    async def become_active(self, lease: ha.Lease) -> None:
        self.log.append((lease.node, lease.node in self.driver.written))
        self.active.set()


async def test_the_work_begins_before_the_announce_is_sent() -> None:
    name = f"term-first-{uuid.uuid4().hex}"
    log: list[tuple[str, bool]] = []
    async with anyio.create_task_group() as tg:
        drivers = [Writes(name) for _ in range(COUNT)]
        for driver in drivers:
            await driver.__aenter__()
        electors, notes = [], []
        for index, driver in enumerate(drivers):
            elector = ha.Elector(driver, "/svc", f"c{index}", timing=FAST)
            note = Notes(driver, log)
            await tg.start(elector.run, note)
            electors.append(elector)
            notes.append(note)
            if index == 0:
                await note.active.wait()
        await anyio.wait_all_tasks_blocked()  # every one stands behind the one before it
        for index in range(COUNT - 1):
            electors[index].quit()
            with anyio.fail_after(10):
                await notes[index + 1].active.wait()
        tg.cancel_scope.cancel()
    for driver in drivers:
        await driver.__aexit__(None, None, None)
    MemoryCluster.drop(name)
    assert len(log) == COUNT
    early = [node for node, announced in log[1:] if announced]
    assert not early, f"announced before its work began: {early}"
