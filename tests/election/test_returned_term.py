"""A term whose ``become_active`` returned: no task is left to it, and it still ends as a term.

Such a leader has no work to stop (issue 31, the handover's client share): its term task ends
when ``become_active`` returns, and the term (its lease, its local deadline, the driver's note
of who leads) lasts until the elector stops it. Before, the task slept on in the term's cancel
scope, so a quit cancelled it and waited for it (two task switches on the old leader's way to
its leave), and every idle leader held it.
"""

from __future__ import annotations

import uuid

import anyio
import pytest

import ha
from ha.drivers.memory import MemoryDriver
from ha.election.journal import Transition
from ha.testing import faults
from tests.support.harness import FAST, wait_for

pytestmark = pytest.mark.anyio


class Returns:
    """Leads by returning at once, keeping the lease it was given."""

    def __init__(self) -> None:
        self.lease: ha.Lease | None = None

    async def become_active(self, lease: ha.Lease) -> None:
        self.lease = lease


class Noting(MemoryDriver):
    """Records the terms the elector shows and hides (``Driver.show_leader``)."""

    def __init__(self, name: str, **kwargs: float) -> None:
        super().__init__(name, **kwargs)
        self.notes: list[str] = []

    def show_leader(self, path: str, identity: bytes, epoch: int) -> None:
        self.notes.append(f"show {epoch}")

    def hide_leader(self, path: str, epoch: int) -> None:
        self.notes.append(f"hide {epoch}")


def term_tasks() -> list[str]:
    return [t.name for t in anyio.get_running_tasks() if t.name == "ha term"]


async def test_a_leader_whose_work_returned_holds_no_task_and_quits_at_once() -> None:
    async with Noting(f"returned-{uuid.uuid4()}", session_timeout=2.0) as driver:
        contender = Returns()
        elector = ha.Elector(driver, "/svc", "a", timing=FAST)
        async with anyio.create_task_group() as tg:
            tg.start_soon(elector.run, contender)
            lease = await elector.wait_active()
            await wait_for(lambda: contender.lease is not None)
            await anyio.wait_all_tasks_blocked()
            assert term_tasks() == [], "a task is still held for a term whose work returned"
            # the term goes on: its lease is valid and the driver still shows it
            assert lease.valid and elector.state is ha.State.ACTIVE
            assert driver.notes == [f"show {lease.epoch}"]
            elector.quit()
            assert not lease.valid, "the lease outlived the quit"
        assert elector.state is ha.State.NEUTRAL
        assert driver.notes == [f"show {lease.epoch}", f"hide {lease.epoch}"]


async def test_a_returned_term_still_stops_on_its_local_deadline() -> None:
    """Held through a silent cut (``hold_on_disconnect``), the term ends on its local deadline
    alone: its lease goes invalid, the elector leaves ACTIVE (the transition says so) and
    the driver's note of it is taken down, with no task of the term left to cancel."""
    timing = ha.Timing(
        backoff=FAST.backoff, fence_backoff=FAST.fence_backoff, hook_timeout=0.5,
        hold_on_disconnect=True,
    )  # fmt: skip
    async with Noting(f"returned-{uuid.uuid4()}", session_timeout=1.0) as driver:
        contender = Returns()
        elector = ha.Elector(driver, "/svc", "a", timing=timing)
        left: list[Transition] = []
        elector.add_listener(lambda t: left.append(t) if t.old is ha.State.ACTIVE else None)
        async with anyio.create_task_group() as tg:
            tg.start_soon(elector.run, contender)
            lease = await elector.wait_active()
            await wait_for(lambda: contender.lease is not None)
            faults(driver).partition()
            await wait_for(lambda: bool(left), 30)
            assert left[0].until is not None, "stopped by something else than the deadline"
            assert not lease.valid
            assert f"hide {lease.epoch}" in driver.notes
            faults(driver).heal()
            tg.cancel_scope.cancel()
