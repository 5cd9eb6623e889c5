"""The sqlite driver's transport: the ha file's two connections, each used by one worker
thread at a time, the lock files of the session (``Liveness``), and the fault gate.

The connections: ``ops`` for the user's operations, ``bg`` for renewals, reaping and polling
(``synchronous=NORMAL``: after a power loss no session survives anyway). Every call to SQLite
runs in a worker thread under the connection's limiter (``in_thread``), and only while the
driver is started (``state``).

Faults: ``gate`` is this transport's ``FaultGate``. Until a test arms it, ``in_thread``,
``read`` and ``write`` are the plain functions below; arming swaps them for gated ones
(``_armed``): every access to the file waits while frozen, an operation raises the next
injected error first.
"""

from __future__ import annotations

import enum
import sqlite3
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

import anyio
import anyio.to_thread

from ...errors import ConnectionLost
from .._faults import FaultGate
from . import clock, tree
from .liveness import Liveness
from .schema import check_file, connect, file_id, map_error, prepare, writing
from .settings import Settings

__all__ = ("Files", "Lifecycle")

T = TypeVar("T")


class Lifecycle(enum.Enum):
    """Where a driver is in its life: ``start`` takes it from NEW to STARTED, ``aclose`` to
    CLOSED, and the test's crash to ABANDONED (then CLOSED by ``aclose``)."""

    NEW = "new"
    STARTED = "started"
    ABANDONED = "abandoned"  # dead as a killed process: files dropped, session left to reapers
    CLOSING = "closing"
    CLOSED = "closed"


class InThread(Protocol):
    """``fn(*args)`` in a worker thread under ``limiter`` (the file's calls)."""

    async def __call__(
        self, limiter: anyio.CapacityLimiter | None, fn: Callable[..., T], *args: Any
    ) -> T: ...


class Operation(Protocol):
    """``fn(connection, *args)`` for a node operation, on the ops connection."""

    async def __call__(self, fn: Callable[..., T], *args: Any) -> T: ...


class Files:
    """The file of ``settings``, opened by ``open`` (a worker thread's) and closed by
    ``close``. ``wrote``: called after each write of an operation (the poller delivers its
    events without waiting a poll)."""

    def __init__(self, settings: Settings, wrote: Callable[[], None]) -> None:
        self.settings = settings
        self.path = settings.path
        self._wrote = wrote
        self.state = Lifecycle.NEW
        self._ops: sqlite3.Connection | None = None  # user operations
        self.bg: sqlite3.Connection | None = None  # renewals, reaping, polling
        self.ops_limiter: anyio.CapacityLimiter | None = None
        self.bg_limiter: anyio.CapacityLimiter | None = None
        self.file_id: tuple[int, int] = (0, 0)
        self.live: Liveness | None = None  # leases and lock files (bg thread)
        self.gate = FaultGate("sqlite", self._armed)
        # the request paths: gated ones once a test armed the gate
        self.in_thread: InThread = self._in_thread
        self.read: Operation = self._read
        self.write: Operation = self._write

    def limit(self) -> None:
        """Make the connections' limiters (on the loop, before the first call)."""
        self.ops_limiter = anyio.CapacityLimiter(1)
        self.bg_limiter = anyio.CapacityLimiter(1)

    # --- the file (worker threads) ------------------------------------------------------------

    def open(self) -> None:
        """Open the file, its two connections and the lock files' directory."""
        clock.check()
        check_file(self.path)
        try:
            self._ops = connect(self.path, self.settings.busy_timeout, self.settings.synchronous)
            # renewals need no fsync: after a power loss no session survives anyway
            self.bg = connect(self.path, self.settings.busy_timeout, "NORMAL")
            instance = prepare(self._ops, self.path)
            self.file_id = file_id(self.path)
            self.live = Liveness(self.path, instance, self.settings.session_timeout)
            self.live.make_lock_dir()
        except BaseException:
            self.close()
            raise

    def close(self, *, unlink: bool = True) -> None:
        """Close the connections and the lock files (``unlink=False``: leave our own file, as
        a killed process does)."""
        if self.live is not None:
            self.live.close(unlink=unlink)
        for conn in (self._ops, self.bg):
            if conn is not None:
                conn.close()
        self._ops = self.bg = None

    def _with_ops(self, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
        if self._ops is None:  # closed, or reopening a replaced file
            raise ConnectionLost(f"{self.path}: not open")
        return fn(self._ops, *args)

    def _write_sync(self, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
        conn = self._ops
        if conn is None:
            raise ConnectionLost(f"{self.path}: not open")
        with writing(conn) as now:
            tree.expire_lapsed(conn, now.host)
            return fn(conn, *args)

    # --- the request paths --------------------------------------------------------------------

    async def _in_thread(
        self, limiter: anyio.CapacityLimiter | None, fn: Callable[..., T], *args: Any
    ) -> T:
        if self.state is not Lifecycle.STARTED or limiter is None:
            raise ConnectionLost(f"{self.path}: the driver is {self.state.value}, not started")
        try:
            return await anyio.to_thread.run_sync(fn, *args, limiter=limiter)
        except sqlite3.Error as exc:
            raise map_error(exc, self.path) from exc
        except OSError as exc:  # the lock files, or a stat of the database
            raise ConnectionLost(f"{self.path}: {exc}") from exc

    async def _read(self, fn: Callable[..., T], *args: Any) -> T:
        return await self.in_thread(self.ops_limiter, self._with_ops, fn, args)

    async def _write(self, fn: Callable[..., T], *args: Any) -> T:
        try:
            return await self.in_thread(self.ops_limiter, self._write_sync, fn, args)
        finally:
            self._wrote()

    # --- faults -------------------------------------------------------------------------------

    def _armed(self) -> None:
        """A test armed the gate: from now on the file's calls pass through it."""
        gate, in_thread, read, write = self.gate, self._in_thread, self._read, self._write

        async def gated_in_thread(
            limiter: anyio.CapacityLimiter | None, fn: Callable[..., T], *args: Any
        ) -> T:
            await gate.thawed()
            return await in_thread(limiter, fn, *args)

        async def gated_read(fn: Callable[..., T], *args: Any) -> T:
            if self.state is Lifecycle.STARTED:
                gate.raise_queued()
            return await read(fn, *args)

        async def gated_write(fn: Callable[..., T], *args: Any) -> T:
            if self.state is Lifecycle.STARTED:
                gate.raise_queued()
            return await write(fn, *args)

        self.in_thread, self.read, self.write = gated_in_thread, gated_read, gated_write
