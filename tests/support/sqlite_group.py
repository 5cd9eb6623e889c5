"""Groups of sqlite electors in processes of their own, each writing under its fence, and the
check of those writes."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import anyio
import anyio.abc
from anyio.streams.buffered import BufferedByteReceiveStream

from ha.testing import Event
from tests.support.backends.sqlite import SqliteBackend

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
