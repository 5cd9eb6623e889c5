"""The embedded backend: one SQLite file shared by the processes of one host.

``ha.connect("sqlite:///var/lib/app/ha.db")`` (see ``settings`` for the URL and its options).
Standard library ``sqlite3`` in WAL mode; every call to it runs in a worker thread, one thread
at a time per connection.

How the driver model maps onto the file:

- A session is a lease: a row ``(id, expires_at)`` that its owner renews every
  ``renew_interval``, and a lock file its process holds, whose free kernel lock tells the
  other processes of its death at once (``liveness``: the lock files, and how leases are
  judged on the clock). Every write transaction first expires the rows whose ``expires_at``
  has passed, deleting their ephemeral nodes in the same transaction.
- Node events are polled from a change log (one row per created, changed or deleted node)
  every ``poll_interval`` seconds, and right after this driver's own writes. Every change after
  ``subscribe`` is delivered, in order; a few from just before it may be delivered too.
- Cost of polling (``benchmarks/sqlite_costs.py``, 2-core VM): an idle process with one peer
  uses about 0.6-0.8 % of a core at the default 100 ms, 1.1-1.4 % at 50 ms, 2-2.5 % at
  20 ms; mostly the loop's wake-up and the hop to a worker thread, paid once per poll.

Clock: ``expires_at`` is on the host's CLOCK_MONOTONIC, one clock for every process of the
host: a process in a time namespace (``unshare --time``, a container restored by CRIU or
``podman container restore``) corrects its reading by the namespace's offset, read from
``/proc/self/timens_offsets`` at every reading (``clock``). Without ``/proc``, or in a process
that made a time namespace for its children only, the driver refuses to start. ``last_contact``
is the process's own ``time.monotonic()`` read with the renewal's reading, just before its
write, mapped onto ``anyio.current_time()`` (rounded down), which keeps the timing assumption
of ``ha.drivers.base``. The driver needs a real clock (not trio's MockClock).

Limits: one host, local file systems only (no NFS: its locks are not reliable).

- A process stopped while it holds SQLite's write lock holds it until it resumes or dies: every
  writer waits. Everyone reports DISCONNECTED meanwhile and actives stop on their local
  deadline: safety holds, but no one leads until then. An idle process takes the lock only to
  renew its lease, in a single statement during which no Python code runs (no fsync either),
  about 0.1 ms each ``renew_interval``: a SIGSTOP at a random moment leaves it held about once
  in 10,000, whatever the process's other threads do (``benchmarks/sqlite_costs.py``, section
  ``frozen``). Its own writes, and the reaping of dead sessions, are transactions of several
  statements: in a process where another thread computes, each statement can wait for the GIL
  (up to the 5 ms switch interval) with the lock held, and with ``synchronous=full`` the commit
  waits for fsync. A process stopped while it writes is much likelier to hold the lock.
- Never delete or replace the file while processes use it (SQLite deletes ``-wal`` files by
  name: see "How To Corrupt An SQLite Database File", 2.4); empty it through a driver. If it
  happens anyway, each driver notices within a poll, reports EXPIRED and opens a session on the
  new file, so no process goes on leading on a file the others no longer see.

Where things are: ``settings`` (URL, options, timings), ``schema`` (the file, its
transactions, its errors), ``tree`` (the nodes as SQL, the change log, ending sessions),
``clock`` (the host's CLOCK_MONOTONIC in any time namespace), ``liveness`` (leases and lock
files: renew, reap), ``files`` (the connections, the worker threads, the fault gate),
``session`` (the renew and poll loops), ``faults`` (the test faults), and here the driver
itself: a facade that owns those parts, starts and closes them, and the node operations.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Sequence
from typing import Any, Self

import anyio
import anyio.to_thread

from ..._background import BackgroundTask
from ...errors import (
    ConfigurationError,
    ConnectionLost,
    HAError,
    NodeExists,
    SessionExpired,
    Unavailable,
)
from .._closing import waits_for_a_close
from .._faults import FaultHooks
from .._input import checked_op, node_data
from .._parts import PartsDriver, SessionState
from ..base import (
    Capabilities,
    ConnectionEvent,
    ConnectionState,
    Create,
    Op,
    SessionKind,
    SessionLease,
    Stat,
    validate_path,
)
from . import tree
from .faults import SqliteFaults
from .files import Files, Lifecycle
from .liveness import lease_of
from .schema import map_error, os_error
from .session import FileSession
from .settings import Settings, parse_url

__all__ = ("SqliteDriver",)


class SqliteDriver(PartsDriver):
    """Sessions, nodes and events in one SQLite file, for the processes of one host."""

    capabilities = Capabilities(
        name="sqlite",
        cross_process=True,
        cross_host=False,
        durable=True,
        push_watches=False,
        sessions=SessionKind.LEASE,
        session_leases=True,
    )

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        session_timeout: float = 2.0,
        poll_interval: float = 0.1,
        renew_interval: float | None = None,
        busy_timeout: float | None = None,
        synchronous: str = "full",
    ) -> None:
        super().__init__()
        self._settings = Settings.check(
            path,
            session_timeout=session_timeout,
            poll_interval=poll_interval,
            renew_interval=renew_interval,
            busy_timeout=busy_timeout,
            synchronous=synchronous,
        )
        self._files = Files(self._settings, wrote=self._poke)
        self._session = FileSession(self._files, self._pass_on, self.watched_paths)
        # the renewer and the poller, stopped alone by a crash and with the rest by aclose()
        self._loops: BackgroundTask | None = None

    @classmethod
    def from_url(cls, url: str, **options: Any) -> Self:
        path, values = parse_url(url, options)
        return cls(path, **values)

    @property
    def path(self) -> str:
        """The database file."""
        return self._files.path

    def __repr__(self) -> str:
        state = self._files.state.value
        return f"<SqliteDriver {self.path} session={self._session.id} {state}>"

    # --- lifecycle --------------------------------------------------------------------------

    async def start(self) -> None:
        files = self._files
        if files.state is not Lifecycle.NEW:
            raise ConfigurationError(f"{self!r} was already started")
        files.limit()
        try:
            # shielded: a session opened and then abandoned would hold its lock until exit;
            # a cancellation is delivered after start returns, inside ``async with``
            with anyio.CancelScope(shield=True):
                monotonic = await anyio.to_thread.run_sync(
                    self._session.open, limiter=files.bg_limiter
                )
        except sqlite3.Error as exc:
            raise self._start_error(map_error(exc, self.path)) from exc
        except OSError as exc:
            raise self._start_error(os_error(exc, self.path, "open")) from exc
        except HAError as exc:
            raise self._start_error(exc) from exc
        files.state = Lifecycle.STARTED
        self._session.started(monotonic)
        self._loops = BackgroundTask(self._session.run, name=f"sqlite loops {self.path}")
        self._loops.start()
        self._emit(ConnectionEvent(ConnectionState.CONNECTED, self._session.id))

    def _start_error(self, exc: HAError) -> HAError:
        self._files.state = Lifecycle.CLOSED
        # a busy or unreachable file at start is Unavailable; other errors say what is wrong
        return Unavailable(str(exc)) if isinstance(exc, ConnectionLost) else exc

    @waits_for_a_close
    async def aclose(self) -> None:
        files = self._files
        if files.state not in (Lifecycle.STARTED, Lifecycle.ABANDONED):
            files.state = Lifecycle.CLOSED
            return
        abandoned = files.state is Lifecycle.ABANDONED
        files.state = Lifecycle.CLOSING
        loops, self._loops = self._loops, None
        try:
            if loops is not None:
                await loops.stop()
        finally:
            if abandoned:  # the crash dropped the files; the session is left to the reapers
                files.state = Lifecycle.CLOSED
            else:
                await self._close_session()

    async def _close_session(self) -> None:
        with anyio.CancelScope(shield=True):
            session = self._session
            sid, session.id, session.connected = session.id, None, False
            try:
                # the ops limiter waits for any operation still running on that connection
                await anyio.to_thread.run_sync(
                    session.shutdown, sid, limiter=self._files.ops_limiter
                )
            finally:
                self._files.state = Lifecycle.CLOSED
                self._emit(ConnectionEvent(ConnectionState.CLOSED, sid))

    def _poke(self) -> None:
        self._session.poke()

    # --- the session, as the parts keep it --------------------------------------------------

    def _session_state(self) -> SessionState:
        return self._session

    @property
    def renewal_interval(self) -> float:
        return self._settings.renew_interval

    @property
    def death_detection(self) -> float:
        # a dead process's lock file is free: the next poll of any peer ends its session
        return min(self._settings.poll_interval, self.session_timeout)

    # --- test faults (ha.testing.faults) ----------------------------------------------------

    def _faults(self) -> FaultHooks:
        return SqliteFaults(
            self.path, self._files.gate, session=lambda: self._session.id, crash=self._abandon
        )

    async def _abandon(self) -> None:
        """Die as a killed process does, without a goodbye.

        Renewals and polls stop, the connections close and the session's kernel lock is released
        (closed, as the kernel does at exit: the lock file stays), but the session row and its
        ephemeral nodes stay for the other drivers to reap. Every later call fails with
        ``ConnectionLost``; ``aclose()`` then only leaves the task group.
        """
        files = self._files
        if files.state is not Lifecycle.STARTED:
            return
        files.state = Lifecycle.ABANDONED
        self._session.connected = False
        assert self._loops is not None and files.ops_limiter is not None
        await self._loops.stop()
        with anyio.CancelScope(shield=True):
            async with files.ops_limiter:  # no operation runs on the connections meanwhile
                await anyio.to_thread.run_sync(
                    lambda: files.close(unlink=False), limiter=files.bg_limiter
                )

    # --- nodes ------------------------------------------------------------------------------------

    def _owner(self) -> int:
        sid = self._session.id
        if sid is None:
            raise SessionExpired(f"{self.path}: no session (it expired; a new one is opening)")
        return sid

    async def session_lease(self, owner: int) -> SessionLease | None:
        return await self._files.read(lease_of, owner)

    async def create(
        self,
        path: str,
        data: bytes = b"",
        *,
        ephemeral: bool = False,
        sequential: bool = False,
        makepath: bool = False,
    ) -> str:
        validate_path(path)
        data = node_data(data)
        owner = self._owner() if ephemeral else None
        if path == "/":
            raise NodeExists(path)
        return await self._files.write(tree.create, path, data, owner, makepath, sequential)

    async def get(self, path: str) -> tuple[bytes, Stat]:
        validate_path(path)
        return await self._files.read(tree.get, path)

    async def exists(self, path: str) -> Stat | None:
        validate_path(path)
        return await self._files.read(tree.exists, path)

    async def set(self, path: str, data: bytes, version: int = -1) -> Stat:
        validate_path(path)
        return await self._files.write(tree.set_data, path, node_data(data), version)

    async def delete(self, path: str, version: int = -1, *, recursive: bool = False) -> None:
        validate_path(path)
        if path == "/":
            raise ConfigurationError("the root node cannot be deleted")
        await self._files.write(tree.delete, path, version, recursive)

    async def children(self, path: str) -> list[str]:
        validate_path(path)
        return await self._files.read(tree.children, path)

    async def transaction(self, ops: Sequence[Op]) -> list[str | Stat | None]:
        checked: list[Op] = []
        owner: int | None = None
        for op in ops:
            checked.append(checked_op(op))
            if isinstance(checked[-1], Create) and checked[-1].ephemeral:
                owner = self._owner()
        if not checked:
            return []
        return await self._files.write(tree.transact, checked, owner)
