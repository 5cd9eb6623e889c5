"""Many electors joining at once on one driver (issue 12): a join waits for its turn
(``ha/election/admission.py``) before its op timeout runs, so a busy backend does not make all
of them time out together. Memory backend behind a proxy that answers one call at a time."""

from __future__ import annotations

import uuid

import anyio
import pytest

import ha
from ha.drivers.base import Driver
from ha.drivers.memory import MemoryDriver
from ha.election import admission
from tests.support.harness import FAST, wait_for
from tests.support.stores import ProxyDriver

pytestmark = pytest.mark.anyio


class OneAtATime(ProxyDriver):
    """A busy backend: one call at a time, each taking ``delay``, in arrival order. Counts the
    calls their caller gave up (cancelled) while waiting or under way."""

    def __init__(self, inner: Driver, delay: float) -> None:
        super().__init__(inner)
        self.delay = delay
        self.lock = anyio.Lock()
        self.abandoned = 0

    async def before(self, name: str, arg: object) -> None:
        try:
            async with self.lock:
                await anyio.sleep(self.delay)
        except anyio.get_cancelled_exc_class():
            self.abandoned += 1
            raise


class Leads:
    async def become_active(self, lease: ha.Lease) -> None:
        await anyio.sleep_forever()


async def test_many_joins_on_a_busy_backend_wait_their_turn_not_their_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """100 new elections on one driver, a join about 8 calls of 2 ms: all joins at once would
    each end after about 1.6 s, past the op timeout of 1 s, and all would fail and join again.
    Four joins at a time, each ends well within it: every elector leads, no call was given up."""
    monkeypatch.setattr(admission, "JOINS_IN_FLIGHT", 4)
    timing = ha.Timing(op_timeout=1.0, backoff=FAST.backoff)
    async with MemoryDriver(f"busy-{uuid.uuid4()}", session_timeout=10.0) as inner:
        driver = OneAtATime(inner, 0.002)
        electors = [ha.Elector(driver, f"/e{i}", "a", timing=timing) for i in range(100)]
        async with anyio.create_task_group() as tg:
            for elector in electors:
                tg.start_soon(elector.run, Leads())
            await wait_for(lambda: all(e.state is ha.State.ACTIVE for e in electors), 60)
            assert driver.abandoned == 0
            for elector in electors:
                elector.quit()


async def test_joins_on_many_drivers_of_one_process_share_the_turns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 31: elections spread over 25 drivers of one process (4 each), on one busy backend.
    Turns per driver let all 100 joins run at once, each ending after about 1.6 s, past the op
    timeout; the process's four turns keep every join within it: all lead, none given up."""
    monkeypatch.setattr(admission, "JOINS_IN_FLIGHT", 4)
    timing = ha.Timing(op_timeout=1.0, backoff=FAST.backoff)
    async with MemoryDriver(f"busy-{uuid.uuid4()}", session_timeout=10.0) as inner:
        drivers = [OneAtATime(inner, 0.002) for _ in range(25)]
        lock = drivers[0].lock
        for driver in drivers:
            driver.lock = lock  # one backend, one call at a time
        electors = [ha.Elector(drivers[i % 25], f"/e{i}", "a", timing=timing) for i in range(100)]
        async with anyio.create_task_group() as tg:
            for elector in electors:
                tg.start_soon(elector.run, Leads())
            await wait_for(lambda: all(e.state is ha.State.ACTIVE for e in electors), 60)
            assert sum(d.abandoned for d in drivers) == 0
            for elector in electors:
                elector.quit()
