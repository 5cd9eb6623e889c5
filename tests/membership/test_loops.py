"""The member and failover-request loops that ``ha run`` and the services share
(``ha/membership/follow.py``): a wakeup set while a loop reads is not lost, and one set before
the loop armed it is (the read after the arm sees what it was about)."""

from __future__ import annotations

import anyio
import pytest

from ha import admin
from ha.drivers.memory import MemoryCluster, MemoryDriver
from ha.membership.follow import Wakeup, follow_failover
from ha.membership.rules import Decision, Eligibility

pytestmark = pytest.mark.anyio


async def test_a_set_after_the_arm_wakes_the_wait() -> None:
    wakeup = Wakeup()
    wakeup.arm()
    wakeup.set()  # as a callback does while the loop reads
    with anyio.fail_after(5):
        await wakeup.wait()


async def test_a_set_before_the_arm_does_not_wake_the_wait() -> None:
    wakeup = Wakeup()
    wakeup.set()  # before the loop's first read, which sees it anyway
    wakeup.arm()
    with anyio.move_on_after(0.05) as scope:
        await wakeup.wait()
    assert scope.cancelled_caught


async def test_a_request_written_while_following_is_considered(anyio_backend: str) -> None:
    rules = Eligibility(b"x", health_check=False)
    acted: list[Decision] = []
    read, arrived = anyio.Event(), anyio.Event()

    def act(decision: Decision) -> None:
        acted.append(decision)
        (arrived if rules.handled else read).set()

    async with MemoryDriver(MemoryCluster(f"loops-{anyio_backend}")) as driver:
        wakeup = Wakeup()
        sub = driver.subscribe("/e/failover", lambda _event: wakeup.set())
        async with anyio.create_task_group() as tg:
            tg.start_soon(follow_failover, driver, "/e", wakeup, rules, lambda: None, act)
            with anyio.fail_after(5):
                await read.wait()  # the first read: no request yet
            request = admin.FailoverRequest("r1", b"a", 7, None, 30.0, 0.0, "test")
            await driver.create("/e/failover", request.encode(), makepath=True)
            with anyio.fail_after(2):  # woken by the node, not by the loop's 5 s timer
                await arrived.wait()
            tg.cancel_scope.cancel()
        sub.close()
    # read (nobody in the queue: history), nothing asked of us
    assert rules.handled == {"r1"} and set(acted) == {Decision()}
