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
files: renew, reap), ``session`` (lifecycle, worker threads, the renew and poll loops), and
here the driver itself: the node operations and the test hooks.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any, Self, TypeVar

import anyio
import anyio.to_thread

from ...errors import ConfigurationError, ConnectionLost, NodeExists, SessionExpired
from .._input import checked_op, node_data
from ..base import Capabilities, Create, Op, SessionKind, SessionLease, Stat, validate_path
from . import tree
from .liveness import lease_of
from .schema import writing
from .session import FileSession, Lifecycle
from .settings import Settings, parse_url

__all__ = ("SqliteDriver",)

T = TypeVar("T")


class SqliteDriver(FileSession):
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
        super().__init__(
            Settings.check(
                path,
                session_timeout=session_timeout,
                poll_interval=poll_interval,
                renew_interval=renew_interval,
                busy_timeout=busy_timeout,
                synchronous=synchronous,
            )
        )

    @classmethod
    def from_url(cls, url: str, **options: Any) -> Self:
        path, values = parse_url(url, options)
        return cls(path, **values)

    @property
    def path(self) -> str:
        """The database file."""
        return self._path

    def __repr__(self) -> str:
        return f"<SqliteDriver {self._path} session={self._session_id} {self._state.value}>"

    # --- calls on the file ----------------------------------------------------------------------

    async def _read(self, fn: Callable[..., T], *args: Any) -> T:
        self._injected_fault()
        return await self._in_thread(self._ops_limiter, self._with_ops, fn, args)

    async def _write(self, fn: Callable[..., T], *args: Any) -> T:
        self._injected_fault()
        try:
            return await self._in_thread(self._ops_limiter, self._write_sync, fn, args)
        finally:
            if self._poke is not None:
                self._poke.set()  # deliver our own changes' events without waiting a poll

    def _with_ops(self, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
        if self._ops is None:  # closed, or reopening a replaced file
            raise ConnectionLost(f"{self._path}: not open")
        return fn(self._ops, *args)

    def _write_sync(self, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
        conn = self._ops
        if conn is None:
            raise ConnectionLost(f"{self._path}: not open")
        with writing(conn) as now:
            tree.expire_lapsed(conn, now.host)
            return fn(conn, *args)

    # --- test hooks: faults a process can meet, for the test harness only -----------------------

    async def _abandon(self) -> None:
        """Test hook: die as a killed process does, without a goodbye.

        Renewals and polls stop, the connections close and the session's kernel lock is released
        (closed, as the kernel does at exit: the lock file stays), but the session row and its
        ephemeral nodes stay for the other drivers to reap. Every later call fails with
        ``ConnectionLost``; ``aclose()`` then only leaves the task group.
        """
        if self._state is not Lifecycle.STARTED:
            return
        self._state = Lifecycle.ABANDONED
        self._connected = False
        assert self._loops is not None and self._ops_limiter is not None
        await self._loops.stop()
        with anyio.CancelScope(shield=True):
            async with self._ops_limiter:  # no operation runs on the connections meanwhile
                await anyio.to_thread.run_sync(
                    lambda: self._close_files(unlink=False), limiter=self._bg_limiter
                )

    def _freeze(self) -> None:
        """Test hook: every access to the file (renewals, polls, operations) waits for
        ``_thaw()``, as when the file's disk stalls: no error, no contact, no renewal."""
        self._injected.freeze()

    def _thaw(self) -> None:
        self._injected.thaw()

    def _fail_next(self, count: int = 1, *, transient: bool = True) -> None:
        """Test hook: the next ``count`` operations fail before reaching the file, with
        ``ConnectionLost`` (as a busy database) or, if not transient, ``AccessDenied``."""
        self._injected.fail_next(
            count,
            transient=transient,
            lost=f"{self._path}: injected fault (database is busy)",
            denied=f"{self._path}: injected fatal fault",
        )

    def _injected_fault(self) -> None:
        if self._state is Lifecycle.STARTED:
            self._injected.raise_next()

    # --- nodes ------------------------------------------------------------------------------------

    def _owner(self) -> int:
        sid = self._session_id
        if sid is None:
            raise SessionExpired(f"{self._path}: no session (it expired; a new one is opening)")
        return sid

    async def session_lease(self, owner: int) -> SessionLease | None:
        return await self._read(lease_of, owner)

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
        return await self._write(tree.create, path, data, owner, makepath, sequential)

    async def get(self, path: str) -> tuple[bytes, Stat]:
        validate_path(path)
        return await self._read(tree.get, path)

    async def exists(self, path: str) -> Stat | None:
        validate_path(path)
        return await self._read(tree.exists, path)

    async def set(self, path: str, data: bytes, version: int = -1) -> Stat:
        validate_path(path)
        return await self._write(tree.set_data, path, node_data(data), version)

    async def delete(self, path: str, version: int = -1, *, recursive: bool = False) -> None:
        validate_path(path)
        if path == "/":
            raise ConfigurationError("the root node cannot be deleted")
        await self._write(tree.delete, path, version, recursive)

    async def children(self, path: str) -> list[str]:
        validate_path(path)
        return await self._read(tree.children, path)

    async def transaction(self, ops: Sequence[Op]) -> list[str | Stat | None]:
        checked: list[Op] = []
        owner: int | None = None
        for op in ops:
            checked.append(checked_op(op))
            if isinstance(checked[-1], Create) and checked[-1].ephemeral:
                owner = self._owner()
        if not checked:
            return []
        return await self._write(tree.transact, checked, owner)
