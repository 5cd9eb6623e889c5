"""P17 through a real ZooKeeper: a standby whose contact went stale does not start a term on
the events it was handed meanwhile (issue 26, item 3), under asyncio and trio.

b stands by behind a; b's driver is frozen (every request waits, its syncs too, so its
``last_contact`` stops while kazoo's pings keep its session alive: a stalled client). a quits
gracefully; b's watch reports the breadcrumb gone and its machine wins. The verdict is what
b's contender was asked to do: ``become_active`` never begins while b's contact is older than
the local deadline, and b leads once thawed.
"""

from __future__ import annotations

import anyio
import pytest

import ha
from ha.election.elector import Elector
from ha.election.lease import Lease
from ha.testing import faults
from tests.support.backends.zookeeper import ZooKeeperBackend

pytestmark = pytest.mark.anyio

SESSION = 2.0


class Contender:
    """Records the age of its driver's contact each time ``become_active`` begins."""

    def __init__(self, driver: ha.Driver) -> None:
        self.driver = driver
        self.ages: list[float] = []

    async def become_active(self, lease: Lease) -> None:
        self.ages.append(anyio.current_time() - self.driver.last_contact)
        await anyio.sleep_forever()


async def wait_for(check: object, what: str) -> None:
    with anyio.fail_after(30):
        while not check():  # type: ignore[operator]
            await anyio.sleep(0.02)


async def test_a_stalled_standby_does_not_start_on_buffered_events(
    zookeeper_backend: ZooKeeperBackend,
) -> None:
    async with (
        zookeeper_backend.driver(session_timeout=SESSION) as da,
        zookeeper_backend.driver(session_timeout=SESSION) as db,
        anyio.create_task_group() as tg,
    ):
        a, b = Elector(da, "/svc", "a"), Elector(db, "/svc", "b")
        ca, cb = Contender(da), Contender(db)
        await tg.start(a.run, ca)
        await a.wait_active()
        await tg.start(b.run, cb)
        await b.wait_state(ha.State.STANDBY)
        span = b.timing.deadline_ratio * db.session_timeout

        faults(db).freeze()
        await wait_for(lambda: anyio.current_time() - db.last_contact > span, "stale contact")
        a.quit()  # graceful: b's watch sees the breadcrumb go
        with anyio.move_on_after(SESSION):  # b's machine has won by now; P17 holds the term
            await wait_for(lambda: cb.ages, "b's become_active")
        assert cb.ages == [], f"b began a term with contact {cb.ages[0]:.3f}s old"

        faults(db).thaw()
        await b.wait_active()
        await wait_for(lambda: cb.ages, "b's become_active")
        assert cb.ages and all(age < span for age in cb.ages), cb.ages
        tg.cancel_scope.cancel()
