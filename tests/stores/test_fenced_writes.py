"""A deposed leader's own write, built from its lease, says ``Fenced`` (issue 14, Python API).

``lease.transaction(driver, ops)`` is the user's fenced write: the lease knows where its fence
ops stand in the transaction, so a failure there is ``Fenced`` and a failure of the user's ops is
``TransactionFailed`` indexed from the user's first op. A real handover on every backend
(memory, sqlite, ZooKeeper), under asyncio and trio.
"""

from __future__ import annotations

import anyio
import anyio.abc
import pytest

import ha
from ha.drivers.base import Create, Driver, SetData
from ha.errors import Fenced, NodeExists, TransactionFailed
from ha.stores import Writer
from tests.support.backends import Backend
from tests.support.contenders import Work
from tests.support.harness import FAST, wait_for

pytestmark = pytest.mark.anyio


async def handover(da: Driver, db: Driver, tg: anyio.abc.TaskGroup) -> tuple[ha.Lease, ha.Lease]:
    """A leads, quits, B leads with a greater epoch: (A's old lease, B's lease)."""
    a, b = ha.Elector(da, "/svc", "a", timing=FAST), ha.Elector(db, "/svc", "b", timing=FAST)
    work_a, work_b = Work(), Work()
    tg.start_soon(a.run, work_a)
    await wait_for(lambda: bool(work_a.leases), within=20)
    tg.start_soon(b.run, work_b)
    await wait_for(lambda: b.state is ha.State.STANDBY, within=20)
    a.quit()
    await wait_for(lambda: bool(work_b.leases), within=20)
    return work_a.leases[0], work_b.leases[0]


async def test_a_late_write_through_the_lease_is_fenced(backend: Backend) -> None:
    async with backend.driver() as da, backend.driver() as db:
        async with anyio.create_task_group() as tg:
            old, new = await handover(da, db, tg)
            assert old.epoch < new.epoch
            with pytest.raises(
                Fenced, match=f"epoch {old.epoch} of '/svc' is no longer the newest"
            ):
                await old.transaction(da, [Create("/late", b"old leader")])
            with pytest.raises(Fenced):
                await Writer(da, old).commit([Create("/late", b"old leader")])
            # the bare transaction names the fence op's index: what transaction() translates
            with pytest.raises(TransactionFailed) as bare:
                await da.transaction([*old.fence_ops(), Create("/late", b"old leader")])
            assert bare.value.index < len(old.fence_ops())
            assert await da.exists("/late") is None
            tg.cancel_scope.cancel()


async def test_the_current_leaders_writes_apply_and_fail_in_its_own_terms(
    backend: Backend,
) -> None:
    async with backend.driver() as da, backend.driver() as db:
        async with anyio.create_task_group() as tg:
            _, lease = await handover(da, db, tg)
            assert await lease.transaction(db, []) == []  # only checks the fence
            [created] = await lease.transaction(db, [Create("/data", b"1")])
            assert created == "/data"
            with pytest.raises(TransactionFailed) as failed:
                await lease.transaction(db, [SetData("/data", b"2"), Create("/data", b"3")])
            assert failed.value.index == 1 and isinstance(failed.value.cause, NodeExists)
            assert (await db.get("/data"))[0] == b"1"  # nothing of it applied
            tg.cancel_scope.cancel()
