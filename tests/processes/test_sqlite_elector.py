"""The elector across real processes on the sqlite backend: crash (SIGKILL) and hang (SIGSTOP).

Each contender is a child process running ``CHILD``: an ``ha.Elector`` whose contender records
its calls in an ``ha.testing.History`` and, while active, keeps writing its epoch to ``/data``
behind ``lease.fence_ops()``. Every history event is printed as a JSON line; the test merges
them (their times are CLOCK_MONOTONIC, one clock for every process) and checks the safety
properties with ``ha.testing.check_history``, plus property 4: fenced writes land in epoch order.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import anyio
import anyio.abc
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream

from ha.testing import Event, check_history
from tests.drivers.test_sqlite import lease_end, stop_outside_write
from tests.support.backends.sqlite import SqliteBackend, sqlite_backend

__all__ = ("sqlite_backend",)  # the fixture, until tests/conftest.py registers the plugin

REPO = Path(__file__).resolve().parents[2]

CHILD = r"""
import sys
import anyio
import ha
from ha.drivers.base import Create, SetData
from ha.drivers.sqlite.driver import SqliteDriver
from ha.errors import TransactionFailed
from ha.testing import History, Recorder

class Printed(History):
    def add(self, *args, **kwargs):
        super().add(*args, **kwargs)
        print("H", self.events[-1].to_json(), flush=True)

class Writer(Recorder):
    # while active: write the epoch behind the fence; a refused write reports being fenced
    def __init__(self, identity, history, driver):
        super().__init__(identity, history)
        self.driver = driver

    async def become_active(self, lease):
        self.history.add(self.identity, "start", lease.epoch)
        try:
            while True:
                try:
                    # each write leaves a sequential node: the backend's order of landing
                    await self.driver.transaction([
                        *lease.fence_ops(),
                        SetData("/data", b"%d" % lease.epoch),
                        Create("/writes/w-", b"%d" % lease.epoch, sequential=True),
                    ])
                except TransactionFailed:
                    self.history.add(self.identity, "refused", lease.epoch)
                    lease.report_fenced()
                    await anyio.sleep_forever()
                self.history.add(self.identity, "write", lease.epoch)
                await anyio.sleep(0.02)
        finally:
            self.history.add(self.identity, "stop", lease.epoch)

async def main(url, name):
    history = Printed()
    timing = ha.Timing(backoff=ha.Backoff(initial=0.01, maximum=0.2), hook_timeout=1.0)
    async with SqliteDriver.from_url(url) as driver:
        print("S", driver.session_id, flush=True)
        driver.subscribe(None, lambda e: print("S", e.session_id, e.state.value, flush=True))
        elector = ha.Elector(driver, "/svc", name, timing=timing)
        elector.add_listener(history.transition)
        await elector.run(Writer(name, history, driver))

anyio.run(main, sys.argv[1], sys.argv[2], backend=sys.argv[3])
"""


class Contender:
    """One child process; its history events and session ids, read by a background task."""

    def __init__(self, name: str, process: anyio.abc.Process, changed: Callable[[], None]) -> None:
        self.name = name
        self.process = process
        self.events: list[Event] = []
        self.sessions: list[int] = []
        self._changed = changed

    async def read(self) -> None:
        assert self.process.stdout is not None
        stream = BufferedByteReceiveStream(self.process.stdout)
        with contextlib.suppress(anyio.EndOfStream, anyio.IncompleteRead):
            while True:
                line = (await stream.receive_until(b"\n", 1 << 16)).decode()
                kind, _, rest = line.partition(" ")
                if kind == "H":
                    self.events.append(Event.from_json(rest))
                elif kind == "S" and rest.split()[0] != "None":
                    self.sessions.append(int(rest.split()[0]))
                self._changed()

    @property
    def state(self) -> str:
        if self.process.returncode is not None:
            return "dead"
        moves = [e for e in self.events if e.kind == "transition"]
        return moves[-1].detail["new"] if moves else "neutral"

    def epoch(self) -> int | None:
        """The epoch of its last move to ACTIVE."""
        won = [
            e.epoch for e in self.events if e.kind == "transition" and e.detail["new"] == "active"
        ]
        return won[-1] if won else None

    def first(self, kind: str, **detail: object) -> Event | None:
        for e in self.events:
            if e.kind == kind and all(e.detail.get(k) == v for k, v in detail.items()):
                return e
        return None


class Group:
    """The contenders of one test; ``until(cond)`` waits for their output to satisfy it."""

    def __init__(self, tg: anyio.abc.TaskGroup, url: str, backend: str) -> None:
        self.tg, self.url, self.backend = tg, url, backend
        self.members: dict[str, Contender] = {}
        self.extra: list[Event] = []  # events the test itself knows (a kill, a lease end)
        self._changed = anyio.Event()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    async def add(self, name: str) -> Contender:
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        process = await anyio.open_process(
            [sys.executable, "-c", CHILD, self.url, name, self.backend],
            env=env,
            stderr=subprocess.DEVNULL,
        )
        member = self.members[name] = Contender(name, process, self._notify)
        self.tg.start_soon(member.read)
        return member

    async def until(self, cond: Callable[[], bool]) -> None:
        with anyio.fail_after(30):  # a hang guard, not a latency check
            while not cond():
                await self._changed.wait()

    def active(self) -> list[Contender]:
        return [m for m in self.members.values() if m.state == "active"]

    def settled(self) -> bool:
        states = sorted(m.state for m in self.members.values())
        return states == ["active"] + ["standby"] * (len(states) - 1)

    def history(self) -> list[Event]:
        events = [e for m in self.members.values() for e in m.events] + self.extra
        return sorted(events, key=lambda e: e.t)

    async def close(self) -> None:
        with anyio.CancelScope(shield=True):
            for member in self.members.values():
                if member.process.returncode is None:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(member.process.pid, signal.SIGCONT)
                    member.process.kill()
                await member.process.wait()
                await member.process.aclose()


@contextlib.asynccontextmanager
async def group(
    backend: SqliteBackend, anyio_backend: str, **options: float
) -> AsyncIterator[Group]:
    async with backend.driver() as driver:
        await driver.create("/data", b"0")  # the active's fenced writes go here
        await driver.create("/writes", b"")  # and a node each, in the order they landed
    query = "&".join(f"{key}={value}" for key, value in options.items())
    async with anyio.create_task_group() as tg:
        contenders = Group(tg, f"{backend.url()}?{query}", anyio_backend)
        try:
            yield contenders
        finally:
            await contenders.close()
            tg.cancel_scope.cancel()


async def check_fenced_writes(backend: SqliteBackend) -> None:
    """Property 4: the epochs of the writes that landed never go down, in the order in which
    they landed (not the order the writers recorded them: a writer stopped between its commit
    and its record records late)."""
    async with backend.driver() as driver:
        names = await driver.children("/writes")  # zero-padded: name order is landing order
        epochs = [int((await driver.get(f"/writes/{name}"))[0]) for name in sorted(names)]
    assert epochs, "no fenced write landed at all"
    assert epochs == sorted(epochs), f"a deposed active's write landed late: {epochs}"


@pytest.mark.anyio
async def test_killed_active_is_replaced_by_a_standby_of_another_process(
    sqlite_backend: SqliteBackend, anyio_backend: str
) -> None:
    # a long lease: only the kernel lock can make the takeover come before it ends
    async with group(sqlite_backend, anyio_backend, session_timeout=6, poll_interval=0.02) as g:
        for name in ("a", "b", "c"):
            await g.add(name)
        await g.until(g.settled)
        (old,) = g.active()
        epoch = old.epoch()
        assert epoch is not None
        await g.until(lambda: old.first("write") is not None)
        expires = await lease_end(sqlite_backend, old.sessions[-1])

        old.process.kill()
        g.extra.append(Event(time.monotonic(), old.name, "stop", epoch))  # its work died with it
        await old.process.wait()
        await g.until(lambda: any(m is not old for m in g.active()))
        (new,) = g.active()
        new_epoch = new.epoch()
        assert new_epoch is not None and new_epoch > epoch
        # fenced the old active, and took over before the old lease could have run out
        fence = new.first("fence", old=old.name)
        assert fence is not None and fence.epoch == epoch
        became = new.first("transition", new="active")
        assert became is not None and became.t < expires
        await g.until(lambda: new.first("write") is not None)
        check_history(g.history())
        await check_fenced_writes(sqlite_backend)


@pytest.mark.anyio
async def test_paused_active_is_replaced_after_its_lease_and_cancelled_on_resume(
    sqlite_backend: SqliteBackend, anyio_backend: str
) -> None:
    async with group(sqlite_backend, anyio_backend, session_timeout=1, poll_interval=0.02) as g:
        for name in ("a", "b"):
            await g.add(name)
        await g.until(g.settled)
        (old,) = g.active()
        epoch = old.epoch()
        assert epoch is not None
        await g.until(lambda: old.first("write") is not None)

        await anyio.to_thread.run_sync(stop_outside_write, old.process.pid, sqlite_backend.file)
        expires = await lease_end(sqlite_backend, old.sessions[-1])  # nobody renews it now
        g.extra.append(Event(expires, old.name, "expire"))
        await g.until(lambda: any(m is not old for m in g.active()))
        (new,) = [m for m in g.active() if m is not old]  # the paused one cannot say
        new_epoch = new.epoch()
        assert new_epoch is not None and new_epoch > epoch
        became = new.first("transition", new="active")
        assert became is not None and became.t > expires  # only once the lease ran out
        await g.until(lambda: new.first("write") is not None)

        paused_at = time.monotonic()
        os.kill(old.process.pid, signal.SIGCONT)
        # on resume: its leadership is cancelled, its session is gone, it rejoins as standby
        await g.until(lambda: any(e.kind == "stop" and e.epoch == epoch for e in old.events))
        first_session = old.sessions[0]
        await g.until(lambda: old.state == "standby" and old.sessions[-1] != first_session)
        left = [
            e
            for e in old.events
            if e.kind == "transition" and e.detail["old"] == "active" and e.t > paused_at
        ]
        assert left and left[0].detail["new"] != "active"
        assert [m.name for m in g.active()] == [new.name]
        await g.until(lambda: sum(e.kind == "write" for e in new.events) >= 3)
        check_history(g.history())
        await check_fenced_writes(sqlite_backend)
