"""The local deadline of many terms on one driver (issue 31: ten thousand elections in one
process): one timer for all of a driver's terms (``ha/election/deadlines.py``), not a timer
task per term that wakes at every renewal; every term still stops on its deadline."""

from __future__ import annotations

import gc
import uuid
import weakref

import anyio
import pytest

import ha
from ha.drivers.memory import MemoryDriver
from ha.election.journal import Transition
from ha.testing import faults
from tests.support.harness import FAST, wait_for

pytestmark = pytest.mark.anyio

COUNT = 40


class Leads:
    async def become_active(self, lease: ha.Lease) -> None:
        await anyio.sleep_forever()


def electors_on(driver: MemoryDriver, timing: ha.Timing) -> list[ha.Elector]:
    return [ha.Elector(driver, f"/e{i}", "a", timing=timing) for i in range(COUNT)]


async def test_an_idle_active_keeps_no_timer_task_of_its_own() -> None:
    """Forty actives on one driver: the tasks they hold while idle grow by at most two per
    active (its elector's loop, its term) and one for them all (the deadline timer); a
    watchdog task per term, asleep until its deadline, made it three per active."""
    async with MemoryDriver(f"dl-{uuid.uuid4()}", session_timeout=2.0) as driver:
        electors = electors_on(driver, FAST)
        async with anyio.create_task_group() as tg:
            tg.start_soon(anyio.sleep_forever)  # the host task group's own share, counted here
            await anyio.sleep(0.05)
            before = len(anyio.get_running_tasks())
            for elector in electors:
                tg.start_soon(elector.run, Leads())
            await wait_for(lambda: all(e.state is ha.State.ACTIVE for e in electors), 30)
            await anyio.sleep(0.1)  # the takeover's writes (history, announce) are done
            held = len(anyio.get_running_tasks()) - before
            assert held <= 2 * COUNT + 1, f"{held} tasks for {COUNT} idle actives"
            tg.cancel_scope.cancel()


async def test_every_term_of_a_driver_stops_on_its_deadline() -> None:
    """The actives hold on through a disconnection (``hold_on_disconnect``): nothing but the
    local deadline stops them. Cut off silently, every one of them stops on it, each term of
    the driver, not only the first one the timer served."""
    timing = ha.Timing(
        backoff=FAST.backoff, fence_backoff=FAST.fence_backoff, hook_timeout=0.5,
        hold_on_disconnect=True,
    )  # fmt: skip
    async with MemoryDriver(f"dl-{uuid.uuid4()}", session_timeout=1.0) as driver:
        electors = electors_on(driver, timing)
        stopped: list[Transition] = []
        for elector in electors:
            elector.add_listener(lambda t: stopped.append(t) if t.old is ha.State.ACTIVE else None)
        async with anyio.create_task_group() as tg:
            for elector in electors:
                tg.start_soon(elector.run, Leads())
            await wait_for(lambda: all(e.state is ha.State.ACTIVE for e in electors), 30)
            faults(driver).partition()
            await wait_for(lambda: len(stopped) == COUNT, 30)
            assert {t.election for t in stopped} == {e.path for e in electors}
            assert all(t.until is not None for t in stopped), "stopped by something else"
            faults(driver).heal()
            tg.cancel_scope.cancel()


async def test_the_timer_keeps_no_driver_alive() -> None:
    """A driver whose terms have ended, closed and dropped, is freed: the map from drivers to
    their timers holds neither side strongly."""
    async with MemoryDriver(f"dl-{uuid.uuid4()}", session_timeout=2.0) as driver:
        elector = ha.Elector(driver, "/e", "a", timing=FAST)
        async with anyio.create_task_group() as tg:
            tg.start_soon(elector.run, Leads())
            await elector.wait_active()
            elector.quit()
    gone = weakref.ref(driver)
    del driver, elector, tg
    gc.collect()
    assert gone() is None
