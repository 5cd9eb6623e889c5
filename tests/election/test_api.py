"""The elector's Python API as its documentation promises it (issue 14, "Python API" edges).

``transitions()`` as a plain ``async for``; ``wait_active()`` / ``wait_state()``; contenders whose
hooks are plain functions refused before the election starts. Every test runs under asyncio and
trio, on the memory backend (what is tested here does not depend on the backend).
"""

from __future__ import annotations

import functools
import gc
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

import ha
from ha.drivers.memory import MemoryDriver
from ha.errors import ConfigurationError, ElectionFailed, ElectorStopped
from ha.testing import faults
from tests.support.contenders import Work
from tests.support.harness import FAST, wait_for

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def drivers(count: int) -> AsyncIterator[list[MemoryDriver]]:
    """``count`` drivers (one session each) on a fresh memory cluster."""
    name = f"api-{uuid.uuid4()}"
    async with MemoryDriver(name, session_timeout=0.5) as first:
        if count == 1:
            yield [first]
            return
        async with MemoryDriver(name, session_timeout=0.5) as second:
            yield [first, second]


def elector(driver: MemoryDriver, identity: str) -> ha.Elector:
    return ha.Elector(driver, "/svc", identity, timing=FAST)


# --- transitions() ---------------------------------------------------------------------------


async def test_transitions_is_an_async_iterable() -> None:
    seen: list[tuple[ha.State, ha.State]] = []

    async def follow(e: ha.Elector) -> None:
        async for t in e.transitions():
            seen.append((t.old, t.new))
            if t.new is ha.State.ACTIVE:
                return

    async with drivers(1) as [d], anyio.create_task_group() as tg:
        a = elector(d, "a")
        tg.start_soon(follow, a)
        await anyio.sleep(0)  # the loop has started: it sees every transition from here
        tg.start_soon(a.run, Work())
        with anyio.fail_after(5):
            while not seen or seen[-1][1] is not ha.State.ACTIVE:
                await anyio.sleep(0.005)
        a.quit()
    assert seen[0][0] is ha.State.NEUTRAL and seen[-1][1] is ha.State.ACTIVE


async def test_transitions_async_with_still_gives_a_receive_stream() -> None:
    async with drivers(1) as [d], anyio.create_task_group() as tg:
        a = elector(d, "a")
        async with a.transitions() as stream:
            tg.start_soon(a.run, Work())
            with anyio.fail_after(5):
                first = await stream.receive()
        assert (first.old, first.new) == (ha.State.NEUTRAL, ha.State.ACTIVE)
        a.quit()


async def test_breaking_out_of_transitions_leaves_no_stream_behind() -> None:
    async with drivers(1) as [d], anyio.create_task_group() as tg:
        a = elector(d, "a")
        tg.start_soon(a.run, Work())
        async for t in a.transitions():
            if t.new is ha.State.ACTIVE:
                break
        gc.collect()  # (the loop's iterator is gone already: nothing refers to it)
        assert not a._reporting.followers
        a.quit()


# --- wait_active() / wait_state() ------------------------------------------------------------


async def test_wait_active_returns_the_lease_once_active() -> None:
    async with drivers(2) as [da, db], anyio.create_task_group() as tg:
        a, b = elector(da, "a"), elector(db, "b")
        work_a, work_b = Work(), Work()
        tg.start_soon(a.run, work_a)  # wait_active() before the run has started waits for it
        lease = await a.wait_active()
        assert lease is a.lease and lease.valid
        await wait_for(lambda: bool(work_a.leases))  # become_active runs in a task of its own
        assert work_a.leases == [lease]
        assert await a.wait_active() is lease  # at once while active
        tg.start_soon(b.run, work_b)
        assert await b.wait_state(ha.State.STANDBY, ha.State.ACTIVE) is ha.State.STANDBY
        a.quit()
        lease_b = await b.wait_active()
        assert lease_b.epoch > lease.epoch and lease_b.identity == b"b"
        assert await a.wait_state(ha.State.NEUTRAL) is ha.State.NEUTRAL
        b.quit()


async def test_a_cancelled_wait_active_loses_nothing() -> None:
    async with drivers(1) as [d], anyio.create_task_group() as tg:
        a = elector(d, "a")
        with anyio.move_on_after(0.01):
            await a.wait_active()  # nobody runs it: cancelled while waiting
        assert not a._reporting._waiters
        tg.start_soon(a.run, Work())
        with anyio.fail_after(5):
            lease = await a.wait_active()
        assert lease is a.lease and lease.valid
        a.quit()


async def test_wait_active_raises_when_the_elector_quits_first() -> None:
    async with drivers(2) as [da, db], anyio.create_task_group() as tg:
        a, b = elector(da, "a"), elector(db, "b")
        tg.start_soon(a.run, Work())
        await a.wait_active()
        tg.start_soon(b.run, Work())
        await b.wait_state(ha.State.STANDBY)

        async def quit_soon() -> None:
            await anyio.sleep(0.05)
            b.quit()

        tg.start_soon(quit_soon)
        with anyio.fail_after(5), pytest.raises(ElectorStopped, match=r"ended \(quit\)"):
            await b.wait_active()
        with pytest.raises(ElectorStopped):  # and at once once it has ended
            await b.wait_active()
        assert await b.wait_state(ha.State.NEUTRAL) is ha.State.NEUTRAL
        a.quit()


async def test_wait_active_raises_when_the_run_is_cancelled() -> None:
    async with drivers(1) as [d]:
        a = elector(d, "a")
        async with anyio.create_task_group() as tg:
            tg.start_soon(a.run, Work())
            await a.wait_active()
            tg.cancel_scope.cancel()
        with pytest.raises(ElectorStopped, match="stopped"):
            await a.wait_active()


async def test_wait_active_raises_election_failed_after_a_fatal_error() -> None:
    async with drivers(1) as [d]:
        faults(d).fail_next(1, transient=False)  # e.g. access denied: a fatal error
        a = elector(d, "a")
        failed: list[BaseException] = []

        async def run() -> None:
            try:
                await a.run(Work())
            except ElectionFailed as exc:
                failed.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            with anyio.fail_after(5), pytest.raises(ElectionFailed, match="injected"):
                await a.wait_active()
        assert failed


async def test_wait_state_needs_a_state() -> None:
    async with drivers(1) as [d]:
        with pytest.raises(ConfigurationError):
            await elector(d, "a").wait_state()


# --- contenders whose hooks are not async ----------------------------------------------------


class SyncActive:
    def become_active(self, lease: ha.Lease) -> None:
        pass


class SyncStandby(Work):
    def become_standby(self) -> None:
        pass


class SyncFence(Work):
    def fence_old_active(self, breadcrumb: bytes) -> None:
        pass


@pytest.mark.parametrize(
    ("contender", "hook"),
    [
        (SyncActive(), "become_active"),
        (SyncStandby(), "become_standby"),
        (SyncFence(), "fence_old_active"),
    ],
)
async def test_a_plain_function_hook_is_refused_before_the_election(
    contender: object, hook: str
) -> None:
    async with drivers(1) as [d]:
        a = elector(d, "a")
        seen: list[Any] = []
        a.add_listener(seen.append)
        with pytest.raises(ConfigurationError, match=rf"\.{hook} must be a coroutine function"):
            await a.run(contender)
        assert seen == [] and await d.exists("/svc/n") is None
        # the elector was not used up: a good contender may still run it
        async with anyio.create_task_group() as tg:
            tg.start_soon(a.run, Work())
            await wait_for(lambda: a.state is ha.State.ACTIVE)
            a.quit()


class AsyncCallable:
    async def __call__(self, lease: ha.Lease) -> None:
        await anyio.sleep_forever()


async def test_async_callables_are_accepted_as_hooks() -> None:
    async def active(lease: ha.Lease, note: str) -> None:
        await anyio.sleep_forever()

    class Partial:
        become_active = functools.partial(active, note="x")

    class CallableObject:
        become_active = AsyncCallable()

    for contender in (Partial(), CallableObject()):
        async with drivers(1) as [d], anyio.create_task_group() as tg:
            a = elector(d, "a")
            tg.start_soon(a.run, contender)
            await wait_for(lambda: a.state is ha.State.ACTIVE)  # noqa: B023 - awaited here
            a.quit()
