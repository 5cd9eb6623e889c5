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
from pathlib import Path

import anyio
import pytest

import ha
from ha.drivers.base import ConnectionEvent, ConnectionState
from ha.drivers.memory import MemoryDriver
from ha.drivers.sqlite import SqliteDriver
from ha.election.elector import Elector
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


class Acting:
    """Acts at every turn of the loop without asking its lease (a worker's loop)."""

    def __init__(self) -> None:
        self.acts = 0

    async def become_active(self, lease: ha.Lease) -> None:
        while True:
            await anyio.sleep(0)
            self.acts += 1


async def test_the_work_is_cancelled_as_the_driver_says_its_session_ended() -> None:
    # the driver's next session opens at once, with fresh contact, in the same breath as the
    # expiry: the work must not act again, though the elector's loop has not run yet
    async with MemoryDriver(f"lease-session-{uuid.uuid4()}", session_timeout=2.0) as driver:
        elector, work = ha.Elector(driver, "/svc", "a", timing=FAST), Acting()
        async with anyio.create_task_group() as tg:
            tg.start_soon(elector.run, work)
            lease = await elector.wait_active()
            while work.acts < 3:
                await anyio.sleep(0)
            acts = work.acts
            driver._learn_expired()  # EXPIRED, then the next session
            assert driver.session_id != lease.session_id
            for _ in range(10):
                await anyio.sleep(0)
            assert work.acts == acts
            tg.cancel_scope.cancel()


async def test_a_sqlite_file_made_anew_gives_the_lease_no_deadline(tmp_path: Path) -> None:
    # the file deleted (an operator, a clean-up): the driver makes it anew, whose sessions are
    # numbered from 1 again, so its next session may carry the lease's own session id; its
    # contact still says nothing of the lease's session
    path = tmp_path / "ha.db"
    seen: list[tuple[int | None, float]] = []
    async with SqliteDriver(str(path), session_timeout=1.0, poll_interval=0.02) as driver:
        elector = ha.Elector(driver, "/svc", "a", timing=FAST)
        async with anyio.create_task_group() as tg:
            tg.start_soon(elector.run, Returns())
            lease = await elector.wait_active()

            def on_connection(event: ConnectionEvent) -> None:  # as the driver says it
                if event.state is ConnectionState.CONNECTED:
                    seen.append((event.session_id, lease.stop_deadline()))

            with driver.subscribe(None, on_connection):
                for suffix in ("", "-wal", "-shm"):
                    Path(f"{path}{suffix}").unlink(missing_ok=True)  # noqa: ASYNC240
                with anyio.fail_after(10):
                    while not seen:
                        await anyio.sleep(0.02)
            tg.cancel_scope.cancel()
    assert seen[0][0] == lease.session_id, "the session id was not reused: no scenario"
    assert seen[0][1] == -math.inf


class Recording:
    """Records (the lease's session, the driver's session) as each term begins."""

    def __init__(self, driver: MemoryDriver) -> None:
        self.driver = driver
        self.began: list[tuple[int, int | None]] = []

    async def become_active(self, lease: ha.Lease) -> None:
        self.began.append((lease.session_id, self.driver.session_id))
        await anyio.sleep_forever()


async def test_no_term_starts_on_a_session_that_ended_while_it_waited_for_contact(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # P17: b, woken from a stall to a win, waits for fresh contact before it starts a term.
    # Meanwhile its session ends and the driver opens the next one at once: that contact is
    # fresh, but it is not the session b won in
    cluster = f"lease-session-{uuid.uuid4()}"
    waiting, stalled = anyio.Event(), True
    real = Elector._contact_fresh

    async def contact_fresh(self: Elector, session: int) -> bool:
        if self.identity == b"b" and stalled:
            self.driver._last_contact -= 100  # type: ignore[attr-defined]  # b stalled here
            waiting.set()
        return await real(self, session)

    monkeypatch.setattr(Elector, "_contact_fresh", contact_fresh)
    async with (
        MemoryDriver(cluster, session_timeout=30.0) as da,  # renewals 10 s apart: none here
        MemoryDriver(cluster, session_timeout=30.0) as db,
        anyio.create_task_group() as tg,
    ):
        a, b = ha.Elector(da, "/svc", "a", timing=FAST), ha.Elector(db, "/svc", "b", timing=FAST)
        work = Recording(db)
        tg.start_soon(a.run, Returns())
        await a.wait_active()
        tg.start_soon(b.run, work)
        await b.wait_state(ha.State.STANDBY)
        a.quit()
        with anyio.fail_after(10):
            await waiting.wait()  # b won and waits for contact
        await anyio.sleep(0.05)
        assert not work.began
        db.expire()  # the server ends b's session...
        db._learn_expired()  # ...and b's driver hears it and opens the next one at once
        stalled = False
        with anyio.fail_after(10):  # b leads, in its new session
            while not work.began:
                await anyio.sleep(0.01)
        tg.cancel_scope.cancel()
    assert all(lease == current for lease, current in work.began), work.began
