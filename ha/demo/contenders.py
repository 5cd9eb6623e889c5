"""The demo's three contenders, and the faults it injects into them.

``ProcessContenders``: each contender is a process (``python -m ha.demo worker URL PATH ID
JOURNAL``, ``worker_main`` below) appending its transitions and notes to one JSON-lines journal
that the demo tails; a crash is SIGKILL, a hang SIGSTOP until SIGCONT. ``InProcessContenders``
(``memory://``): each is a task of this process with its own memory driver; a crash is a
crashed driver, a hang a partitioned one. Records flow into the ``Model`` either way.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import IO, Any

import anyio
import anyio.abc
import anyio.to_thread

from .._process import Child, quit_on_signals, spawn
from ..drivers import connect
from ..drivers.memory import MemoryDriver
from ..election.elector import Elector
from ..election.journal import JournalWriter
from ..election.lease import Lease
from ..election.names import decode_breadcrumb
from .model import Model

__all__ = ("Contenders", "DemoWork", "InProcessContenders", "ProcessContenders", "worker_main")


# --- the contender's work: what an active does, and notes about it -------------------------------

Note = Callable[[str, str], None]


def note_record(identity: str, kind: str, text: str) -> dict[str, Any]:
    return {"ts": time.time(), "identity": identity, "note": kind, "text": text}


class DemoWork:
    """A contender whose work is to wait; it notes when the work starts, stops and fences."""

    def __init__(self, note: Note) -> None:
        self.note = note

    async def become_active(self, lease: Lease) -> None:
        self.note("work", f"work started (epoch {lease.epoch})")
        try:
            await anyio.sleep_forever()
        finally:
            self.note("stopped", f"work of epoch {lease.epoch} cancelled")

    async def fence_old_active(self, breadcrumb: bytes) -> None:
        crumb = decode_breadcrumb(breadcrumb)
        who = "an unreadable breadcrumb" if crumb is None else f"{crumb.identity.decode()}"
        epoch = "" if crumb is None or crumb.epoch is None else f" (epoch {crumb.epoch})"
        self.note("fenced", f"fenced {who}{epoch} before taking over")


# --- the contenders: processes, or tasks of this process -----------------------------------------


class Contenders(ABC):
    """Three contenders and the faults the demo injects; records flow into ``model``."""

    crash_name = "SIGKILL"
    hang_name = "SIGSTOP"
    resume_name = "SIGCONT"

    def __init__(self, url: str, path: str, model: Model) -> None:
        self.url = url
        self.path = path
        self.model = model

    @abstractmethod
    async def start(self, identity: str) -> None: ...

    @abstractmethod
    async def crash(self, identity: str) -> None: ...

    @abstractmethod
    async def hang(self, identity: str) -> None: ...

    @abstractmethod
    async def resume(self, identity: str) -> None: ...

    @abstractmethod
    async def pump(self) -> None:
        """Feed records into the model until cancelled."""

    @abstractmethod
    async def aclose(self) -> None: ...

    @property
    @abstractmethod
    def session_timeout(self) -> float: ...

    def pid(self, identity: str) -> int | None:
        return None


class ProcessContenders(Contenders):
    """Each contender is a process (``python -m ha.demo worker``) sharing a journal file."""

    def __init__(self, url: str, path: str, model: Model, workdir: str) -> None:
        super().__init__(url, path, model)
        self.journal = os.path.join(workdir, "journal.jsonl")  # workers create it
        self.children: dict[str, Child] = {}
        self._file: IO[str] | None = None
        self._buffer = ""
        self._timeout = connect(url).session_timeout

    @property
    def session_timeout(self) -> float:
        return self._timeout

    def pid(self, identity: str) -> int | None:
        child = self.children.get(identity)
        return None if child is None else child.pid

    async def start(self, identity: str) -> None:
        argv = [sys.executable, "-m", "ha.demo", "worker", self.url, self.path, identity]
        self.children[identity] = await spawn([*argv, self.journal])

    async def crash(self, identity: str) -> None:
        child = self.children.pop(identity)
        os.kill(child.pid, signal.SIGKILL)
        await child.wait()

    async def hang(self, identity: str) -> None:
        os.kill(self.children[identity].pid, signal.SIGSTOP)

    async def resume(self, identity: str) -> None:
        os.kill(self.children[identity].pid, signal.SIGCONT)

    def _read(self) -> list[dict[str, Any]]:
        if self._file is None:
            try:
                self._file = open(self.journal, encoding="utf-8")  # noqa: SIM115 - kept open
            except FileNotFoundError:
                return []  # no worker has written yet
        self._buffer += self._file.read()
        *lines, self._buffer = self._buffer.split("\n")
        records = []
        for line in lines:
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a writer killed mid-line
        return records

    async def pump(self) -> None:
        while True:
            for record in await anyio.to_thread.run_sync(self._read):
                self.model.apply(record)
            await anyio.sleep(0.02)

    async def aclose(self) -> None:
        # standbys first, the active last: otherwise each quit hands the lead to the next
        order = sorted(self.children, key=lambda i: self.model.rows[i].state == "active")
        with anyio.CancelScope(shield=True):
            for child in self.children.values():
                child.signal_group(signal.SIGCONT)
            for identity in order:
                await self.children[identity].stop(2.0)  # SIGTERM: the worker quits cleanly
            self.children.clear()

    def close_journal(self) -> None:
        """After ``pump`` has stopped."""
        if self._file is not None:
            self._file.close()
            self._file = None


class InProcessContenders(Contenders):
    """Each contender is a task of this process with its own memory driver (``memory://``)."""

    crash_name = "crash"
    hang_name = "partition"
    resume_name = "heal"

    def __init__(self, url: str, path: str, model: Model, tg: anyio.abc.TaskGroup) -> None:
        super().__init__(url, path, model)
        self.tg = tg
        self.drivers: dict[str, MemoryDriver] = {}
        self.scopes: dict[str, anyio.CancelScope] = {}
        self._timeout = connect(url).session_timeout

    @property
    def session_timeout(self) -> float:
        return self._timeout

    def _note(self, identity: str) -> Note:
        def note(kind: str, text: str) -> None:
            self.model.apply(note_record(identity, kind, text))

        return note

    async def start(self, identity: str) -> None:
        await self.tg.start(self._contender, identity)

    async def _contender(
        self, identity: str, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        driver = connect(self.url)
        assert isinstance(driver, MemoryDriver)
        with anyio.CancelScope() as scope:
            self.scopes[identity] = scope
            self.drivers[identity] = driver
            async with driver:
                elector = Elector(driver, self.path, identity)
                async with elector.transitions() as stream, anyio.create_task_group() as tg:
                    task_status.started()

                    async def follow() -> None:
                        async for t in stream:
                            self.model.apply(t.to_json())

                    tg.start_soon(follow)
                    await elector.run(DemoWork(self._note(identity)))
                    tg.cancel_scope.cancel()

    async def crash(self, identity: str) -> None:
        self.drivers[identity].crash()  # no goodbye: the session dies when it times out
        self.scopes.pop(identity).cancel()

    async def hang(self, identity: str) -> None:
        self.drivers[identity].partition()

    async def resume(self, identity: str) -> None:
        self.drivers[identity].heal()

    async def pump(self) -> None:
        await anyio.sleep_forever()  # records arrive directly

    async def aclose(self) -> None:
        order = sorted(self.scopes, key=lambda i: self.model.rows[i].state == "active")
        for identity in order:
            self.scopes[identity].cancel()


# --- one contender process ---------------------------------------------------------------------


async def _worker(url: str, path: str, identity: str, journal: str, notes: IO[str]) -> None:
    def note(kind: str, text: str) -> None:
        record = note_record(identity, kind, text) | {"pid": os.getpid()}
        notes.write(json.dumps(record) + "\n")  # one write, O_APPEND: lines never interleave
        notes.flush()

    note("started", f"pid {os.getpid()}")
    async with connect(url) as driver:
        elector = Elector(driver, path, identity, journal=JournalWriter(journal))
        async with anyio.create_task_group() as tg:
            tg.start_soon(quit_on_signals, elector.quit)
            await elector.run(DemoWork(note))
            tg.cancel_scope.cancel()


def worker_main(argv: list[str]) -> None:
    if len(argv) != 5 or argv[0] != "worker":
        sys.exit("usage: python -m ha.demo worker URL PATH IDENTITY JOURNAL")
    # the demo shows what the journal says; the elector's own warnings would garble its view
    logging.getLogger("ha").addHandler(logging.NullHandler())
    logging.getLogger("ha").propagate = False
    _, url, path, identity, journal = argv
    with open(journal, "a", encoding="utf-8") as notes:
        anyio.run(_worker, url, path, identity, journal, notes)
