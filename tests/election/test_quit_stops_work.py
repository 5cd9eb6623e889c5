"""A quit stops the active work at once, even while the elector's loop waits on the backend.

``Elector.quit()`` begins the term's stop itself (P14: a quit stops the work in every phase);
the loop's ``StopActive`` then only waits for it. Before, the quit waited in the loop's inbox
behind whatever call the loop was in, such as the new leader's announce write to a backend
that had stopped answering: the work ran on until that call returned or timed out.
"""

from __future__ import annotations

import uuid

import anyio
import anyio.lowlevel
import pytest

import ha
from ha.drivers.memory import MemoryCluster, MemoryDriver
from ha.testing import faults
from tests.support.harness import FAST

pytestmark = pytest.mark.anyio


class Work:
    """The first term does nothing; the next one freezes its driver as it begins (the
    announce to the contender behind it then waits), quits, and records whether its work was
    cancelled."""

    def __init__(self, driver: MemoryDriver, freeze: bool) -> None:
        self.driver = driver
        self.freeze = freeze
        self.elector: ha.Elector | None = None
        self.active = anyio.Event()
        self.quit = anyio.Event()
        self.stopped = anyio.Event()

    async def become_active(self, lease: ha.Lease) -> None:
        self.active.set()
        if not self.freeze:
            return
        faults(self.driver).freeze()  # every operation waits: the loop's announce write too
        await anyio.lowlevel.checkpoint()  # the loop is now in that write
        assert self.elector is not None
        self.elector.quit()
        self.quit.set()
        try:
            await anyio.sleep_forever()
        finally:
            self.stopped.set()


async def test_a_quit_stops_the_work_while_the_loop_waits_on_the_backend() -> None:
    name = f"quit-stops-{uuid.uuid4().hex}"
    async with (
        MemoryDriver(name) as da,
        MemoryDriver(name) as db,
        MemoryDriver(name) as dc,
        anyio.create_task_group() as tg,
    ):
        works = {}
        for identity, driver in (("a", da), ("b", db), ("c", dc)):
            work = works[identity] = Work(driver, freeze=identity == "b")
            work.elector = ha.Elector(driver, "/svc", identity.encode(), timing=FAST)
            await tg.start(work.elector.run, work)
            if identity == "a":
                await work.active.wait()
        await anyio.wait_all_tasks_blocked()  # b waits behind a, c behind b
        assert works["a"].elector is not None
        works["a"].elector.quit()  # b takes over, with c behind it: it announces
        await works["b"].quit.wait()
        await anyio.wait_all_tasks_blocked()  # everything that can run without b's backend ran
        stopped = works["b"].stopped.is_set()
        faults(db).thaw()
        tg.cancel_scope.cancel()
    MemoryCluster.drop(name)
    assert stopped, "the work ran on after quit() while the loop waited on the backend"
