"""Regression tests for the ways a deposed leader could still act (the safety issue), in process.

Each test judges from outside the elector: what the contenders did (acts recorded with the time
of the act, on this process's monotonic clock), what the backend holds, or what a fenced write
did. Every test runs under asyncio and trio; those taking ``net`` run on memory and sqlite.
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import anyio.abc
import pytest

import ha
from ha import admin
from ha.drivers.base import Create, Driver
from ha.drivers.memory import MemoryDriver
from ha.drivers.sqlite.driver import SqliteDriver
from ha.election.lease import Lease
from ha.errors import TransactionFailed
from ha.services import services
from ha.testing import faults
from tests.support.harness import FAST, Cluster, Net, Node, SqliteNet, cluster, net, wait_for
from tests.support.services import FAST as SERVICES_FAST
from tests.support.services import SESSION, join, process
from tests.support.stores import ProxyDriver

__all__ = ("net",)  # the fixture

pytestmark = pytest.mark.anyio


class Actor:
    """A contender whose work acts every few milliseconds, and only while ``lease.valid``.

    ``acts`` holds the monotonic time of every act: what a witness outside the elector sees.
    ``stall()``, when set, is called once after a few acts and may block the whole process.
    """

    def __init__(self, stall: Callable[[], None] | None = None) -> None:
        self.acts: list[float] = []
        self.leases: list[Lease] = []
        self.stall = stall
        self.resumed_at = math.inf

    async def become_active(self, lease: Lease) -> None:
        self.leases.append(lease)
        while True:
            await anyio.sleep(0.005)
            if self.stall is not None and len(self.acts) == 3:
                self.stall()
                self.stall, self.resumed_at = None, time.monotonic()
            if lease.valid:
                self.acts.append(time.monotonic())


async def test_a_lease_is_not_valid_past_its_deadline_after_a_pause() -> None:
    """Item 2: a blocking call in the work past the session timeout, no contact since: the
    work asks ``lease.valid`` before the watchdog task could run: it must say no."""
    timeout = 0.4
    async with MemoryDriver(f"pause-{uuid.uuid4()}", session_timeout=timeout) as driver:

        def pause() -> None:
            faults(driver).partition()  # no contact after the pause either: the session is lost
            time.sleep(timeout * 1.5)  # the whole process stops (a GC pause, a blocking call)

        actor = Actor(pause)
        elector = ha.Elector(driver, "/pause", "a", timing=FAST)
        async with anyio.create_task_group() as tg:
            tg.start_soon(elector.run, actor)
            await wait_for(lambda: elector.state is ha.State.ACTIVE)
            await wait_for(lambda: actor.stall is None and elector.state is not ha.State.ACTIVE)
            late = [t for t in actor.acts if t >= actor.resumed_at]
            assert late == [], f"acted {len(late)} times after a pause past the deadline"
            elector.quit()


async def test_a_refused_fence_is_retried_with_a_growing_backoff_never_given_up(
    net: Net,
) -> None:
    """Item 10 of the safety issue, and issue 26 item 6: a fence that keeps refusing is
    retried with a growing backoff (it was run ~20 times a second), and never given up (past
    max_retries the standby gave up, leaving no active and no standby): once a fence works it
    leads. The refusals are visible in its statistics meanwhile."""
    backoff = ha.Backoff(initial=0.02, maximum=0.2)
    timing = ha.Timing(fence_backoff=backoff, max_retries=2)
    async with cluster(net) as c:
        a = await c.add("a")
        await wait_for(c.settled)
        b = await c.add("b", timing=timing)
        await wait_for(lambda: b.state is ha.State.STANDBY)
        b.rec.refuse_fence = 6  # twice max_retries + 1: the old bound
        notes: list[str | None] = []

        def noted() -> bool:
            notes.append(b.elector.fencing_note())
            return b.state is ha.State.ACTIVE or b.done.is_set()

        await c.crash(a)
        await wait_for(noted, within=20)
        assert b.error is None and b.state is ha.State.ACTIVE
        fences = [e.t for e in c.history.events if e.kind == "fence" and e.identity == "b"]
        gaps = [later - earlier for earlier, later in zip(fences, fences[1:], strict=False)]
        assert len(fences) == 7  # six refused, the seventh worked
        # each retry waited at least its backoff's floor (doubling, capped, drawn from the
        # upper half): the waits grew. Lower bounds only: a loaded machine makes them longer
        floors = [
            min(backoff.maximum, backoff.initial * backoff.multiplier**k) * (1 - backoff.jitter)
            for k in range(6)
        ]
        assert all(gap >= floor * 0.99 for gap, floor in zip(gaps, floors, strict=True)), gaps
        assert any(n is not None and "fencing 'a' failed 6 times" in n for n in notes), notes
        assert b.elector.fencing_note() is None  # it leads: nothing refused any more


async def active_beside_standby(
    c: Cluster, driver: Driver, tg: anyio.abc.TaskGroup, session_timeout: float
) -> tuple[ha.Elector, Node]:
    """``a`` leads on ``driver`` (a session the test keeps open after a quit), ``b`` waits."""
    a = ha.Elector(driver, "/svc", "a", timing=FAST)
    tg.start_soon(a.run, Actor())
    await wait_for(lambda: a.state is ha.State.ACTIVE)
    b = await c.add("b", session_timeout=session_timeout)
    await wait_for(lambda: b.state is ha.State.STANDBY)
    return a, b


async def test_a_quit_while_disconnected_leaves_the_queue_once_back() -> None:
    """Item 9: the active quits while cut off; its session outlives the blip (as `ha run
    --health` keeps its session while it stays out). Its node must not stay first in the
    queue."""
    async with cluster() as c, c.probe(2.0) as driver, anyio.create_task_group() as tg:
        assert isinstance(driver, MemoryDriver)
        a, b = await active_beside_standby(c, driver, tg, 2.0)
        session = driver.session_id
        faults(driver).disconnect()
        a.quit()
        await anyio.sleep(0.05)
        faults(driver).reconnect()  # the same session: nothing expires
        await wait_for(lambda: b.state is ha.State.ACTIVE, within=1.5)
        assert driver.session_id == session


async def test_a_quit_while_the_database_is_busy_leaves_the_queue(tmp_path: Path) -> None:
    """Item 9 on sqlite: leaving the queue meets a busy database and is tried again, instead
    of leaving our node first in the queue of a session that lives on."""
    net = SqliteNet(tmp_path)
    async with cluster(net) as c, c.probe(3.0) as driver, anyio.create_task_group() as tg:
        assert isinstance(driver, SqliteDriver)
        a, b = await active_beside_standby(c, driver, tg, 3.0)
        session = driver.session_id
        faults(driver).fail_next(2, transient=True)  # the release meets "database is busy"
        a.quit()
        await wait_for(lambda: b.state is ha.State.ACTIVE, within=2.0)
        assert driver.session_id == session  # well before a's lease could have run out


class SlowStopper:
    """A contender whose work takes a while to stop (flushing, draining): ``spans`` holds the
    monotonic (start, end) of each term's work, end being when the work had really stopped."""

    def __init__(self, spans: list[tuple[str, float, float]], name: str) -> None:
        self.spans, self.name = spans, name

    async def become_active(self, lease: Lease) -> None:
        started = time.monotonic()
        try:
            await anyio.sleep_forever()
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.sleep(0.3)
            self.spans.append((self.name, started, time.monotonic()))


def overlaps(spans: list[tuple[str, float, float]]) -> list[str]:
    ordered = sorted(spans, key=lambda s: s[1])
    return [
        f"{a[0]} worked until {a[2]:.3f}, {b[0]} started at {b[1]:.3f}"
        for a, b in zip(ordered, ordered[1:], strict=False)
        if b[1] < a[2] and a[0] != b[0]
    ]


async def test_format_force_never_starts_a_standby_while_the_active_works(net: Net) -> None:
    """Item 4: ``ha format --force`` during a run must not let a standby start, unfenced, while
    the old active is still stopping."""
    spans: list[tuple[str, float, float]] = []
    async with cluster(net) as c, c.probe() as da, c.probe() as db, c.probe() as admin_driver:
        async with anyio.create_task_group() as tg:
            a = ha.Elector(da, "/svc", "a", timing=FAST)
            b = ha.Elector(db, "/svc", "b", timing=FAST)
            tg.start_soon(a.run, SlowStopper(spans, "a"))
            await wait_for(lambda: a.state is ha.State.ACTIVE)
            tg.start_soon(b.run, SlowStopper(spans, "b"))
            await wait_for(lambda: b.state is ha.State.STANDBY)
            await admin.format_election(admin_driver, "/svc", force=True)
            await anyio.sleep(1.0)
            a.quit()
            b.quit()
    assert overlaps(spans) == []


class BeforeFirstDelete(ProxyDriver):
    """Runs ``action`` once, before the first single-node delete (the cleanup's wipe)."""

    def __init__(self, inner: Driver, action: Callable[[], Awaitable[None]]) -> None:
        super().__init__(inner)
        self.action, self.fired = action, False

    async def before(self, name: str, arg: object) -> None:
        if name == "delete" and not self.fired:
            self.fired = True
            await self.action()


@pytest.mark.parametrize("backend_name", ["memory", "sqlite"])
async def test_cleanup_all_data_never_sends_fencing_tokens_back(
    backend_name: str, request: pytest.FixtureRequest
) -> None:
    """Item 5: the leader removes the cluster's data while a standby runs; a standby that
    claimed during the wipe lost its lock and the epoch node (protocol 1), epochs restarted,
    and a stale epoch-1 lease passed the fence again. Tokens only grow (creation orders) and
    the stale write fails."""
    backend = request.getfixturevalue(f"{backend_name}_backend")
    log: list[tuple[str, str]] = []
    epochs: list[int] = []
    async with (
        process(backend, "y") as (y, _),
        backend.driver(session_timeout=SESSION) as inner,
        anyio.create_task_group() as tg,
    ):

        async def y_may_claim() -> None:
            with anyio.move_on_after(1.0):
                await wait_for(lambda: y.lease is not None)

        driver = BeforeFirstDelete(inner, y_may_claim)
        async with services(driver, "c1", identity="x", timing=SERVICES_FAST) as x:
            await join(x, "dispatcher", log)
            await wait_for(lambda: x.lease is not None)
            stale = x.lease
            assert stale is not None
            await join(y, "dispatcher", log)

            async def watch_y() -> None:
                while True:
                    lease = y.lease
                    if lease is not None and (not epochs or epochs[-1] != lease.epoch):
                        epochs.append(lease.epoch)
                    await anyio.sleep(0.002)

            tg.start_soon(watch_y)
            await anyio.sleep(0.2)  # y is a standby now
            await x.close_and_cleanup_all_data()
            await wait_for(lambda: y.lease is not None)
            await anyio.sleep(0.3)
            tg.cancel_scope.cancel()
            with pytest.raises(TransactionFailed):
                await inner.transaction([*stale.fence_ops(), Create("/stale-write", b"x")])
    assert epochs and epochs[0] > stale.epoch, f"y was granted {epochs} after {stale.epoch}"
    assert epochs == sorted(set(epochs)), f"fencing tokens went back: {epochs}"


class SlowFailingCrumb(ProxyDriver):
    """Reading the breadcrumbs (a leftover one makes the new leader read them), the queue's
    listing beside it hangs until the op's timeout cancels it, and the breadcrumbs' listing
    outlives that timeout (shielded), then fails: an error and the cancellation meet in one
    group. Armed once."""

    def __init__(self, inner: Driver) -> None:
        super().__init__(inner)
        self.armed = True
        self.reading = False  # the breadcrumbs' listing is under way

    async def before(self, name: str, arg: object) -> None:
        node = str(arg).rsplit("/", 1)[-1]
        if name != "children" or not self.armed:
            return
        if node == "n":
            await anyio.sleep(0.01)  # whichever of the two listings the group starts first
            if self.reading:
                await anyio.sleep(1.0)  # cancelled by the op's timeout
            return
        if node != "b":
            return
        self.reading = True
        with anyio.CancelScope(shield=True):
            await anyio.sleep(0.2)
        self.armed = self.reading = False
        raise ha.errors.SessionExpired("injected: the session ended during the read")


async def test_a_read_error_meeting_the_op_timeout_does_not_crash_run() -> None:
    """Found by the memory chaos rounds (trio): SessionExpired from the breadcrumb read beside
    the op timeout's cancellation left the read's task group as a BaseExceptionGroup that
    escaped run() and killed the elector."""
    timing = ha.Timing(op_timeout=0.05, backoff=FAST.backoff)
    async with MemoryDriver(f"group-{uuid.uuid4()}", session_timeout=1.0) as inner:
        await inner.create("/svc/b/crashed_1", b"left by a crash", makepath=True)
        driver = SlowFailingCrumb(inner)
        elector = ha.Elector(driver, "/svc", "a", timing=timing)
        actor = Actor()
        async with anyio.create_task_group() as tg:
            tg.start_soon(elector.run, actor)
            await wait_for(lambda: elector.state is ha.State.ACTIVE)
            assert not driver.armed  # the group of error and cancellation did happen
            elector.quit()
