"""A lease is valid only while the driver's session is the lease's.

Network round sqlite seed 38027 (asyncio): contender b, leader with epoch 7 in session 4, was
SIGSTOPped 1.5 s (session 1 s); c expired session 4 and led with epoch 9. On the resume b's
driver found session 4 gone ("session 4 expired") and opened its next session at once, with a
fresh ``last_contact``; the elector had not handled the expiry yet, and the lease's deadline,
counted from the driver's last contact whatever its session, said valid: b acted once, 16 ms
after the resume, inside c's term (its fenced write was refused). Every driver opens a new
session after an expiry, so the same window is there on each.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import pytest

import ha
from ha.drivers.memory import MemoryDriver
from tests.support.harness import FAST

pytestmark = pytest.mark.anyio


class Returns:
    async def become_active(self, lease: ha.Lease) -> None:
        pass


@asynccontextmanager
async def leading() -> AsyncIterator[tuple[MemoryDriver, ha.Lease]]:
    """A driver and the lease of the elector leading on it, whose work has returned."""
    async with MemoryDriver(f"lease-session-{uuid.uuid4()}", session_timeout=2.0) as driver:
        elector = ha.Elector(driver, "/svc", "a", timing=FAST)
        async with anyio.create_task_group() as tg:
            tg.start_soon(elector.run, Returns())
            yield driver, await elector.wait_active()
            tg.cancel_scope.cancel()


async def test_a_lease_is_not_valid_on_a_newer_sessions_contact() -> None:
    async with leading() as (driver, lease):
        assert lease.valid and lease.session_id == driver.session_id
        # the driver's next session, with fresh contact; the elector has not run since
        driver._open_session()
        assert driver.session_id != lease.session_id
        assert not lease.valid
        assert lease.stop_deadline() == -math.inf


async def test_a_lease_stays_valid_on_its_own_sessions_contact() -> None:
    async with leading() as (driver, lease):
        before = lease.stop_deadline()
        await anyio.sleep(driver.session_timeout / 2)  # renewed meanwhile, same session
        assert lease.valid and lease.stop_deadline() > before
