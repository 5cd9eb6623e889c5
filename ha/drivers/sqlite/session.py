"""A session on an ha file, kept in the background: the base of ``SqliteDriver``.

``FileSession`` opens the file and a session on it (``start``), runs every call to SQLite in a
worker thread, one at a time per connection (``_in_thread``), and keeps two loops in one
``ha._background.BackgroundTask``:

- the renewer extends the lease every ``renew_interval`` (``Liveness.renew``), reports
  DISCONNECTED / RECONNECTED as the file stops and starts answering, EXPIRED when the session
  is found gone, then CONNECTED with a new one; a file deleted or replaced is opened again;
- the poller, every ``poll_interval`` and right after the driver's own writes, ends the
  sessions of dead processes and run-out leases (``Liveness.reap``) and delivers the node
  events of the change log (``tree.read_changes``).

The connections: ``_ops`` for the user's operations, ``_bg`` for renewals, reaping and polling
(``synchronous=NORMAL``: after a power loss no session survives anyway).
"""

from __future__ import annotations

import enum
import logging
import sqlite3
from collections.abc import Callable
from typing import Any, TypeVar

import anyio
import anyio.to_thread

from ..._background import BackgroundTask
from ..._clock import loop_minus_monotonic
from ...errors import ConfigurationError, ConnectionLost, HAError, Unavailable
from .._faults import Injected
from ..base import ConnectionEvent, ConnectionState, Driver, NodeEvent, NodeEventKind
from . import clock, tree
from .liveness import Liveness
from .schema import (
    FileReplaced,
    check_file,
    check_same_file,
    connect,
    file_id,
    map_error,
    os_error,
    prepare,
    writing,
)
from .settings import Settings

__all__ = ("MAX_CHANGES_PER_POLL", "FileSession", "Lifecycle")

log = logging.getLogger("ha.drivers.sqlite")

T = TypeVar("T")

MAX_CHANGES_PER_POLL = 1_000


class Lifecycle(enum.Enum):
    """Where a driver is in its life: NEW -> STARTED -> CLOSING -> CLOSED; a failed start goes
    to CLOSED, and the ``_abandon()`` test hook to ABANDONED (then CLOSED by ``aclose``)."""

    NEW = "new"
    STARTED = "started"
    ABANDONED = "abandoned"  # dead as a killed process: files dropped, session left to reapers
    CLOSING = "closing"
    CLOSED = "closed"


class FileSession(Driver):
    """One session at a time on the file of ``settings``; the node operations are the
    subclass's (``SqliteDriver``)."""

    @property
    def renewal_interval(self) -> float:
        return self._settings.renew_interval

    @property
    def death_detection(self) -> float:
        # a dead process's lock file is free: the next poll of any peer ends its session
        return min(self._settings.poll_interval, self.session_timeout)

    def __init__(self, settings: Settings) -> None:
        super().__init__()
        self._settings = settings
        self._path = settings.path
        self._state = Lifecycle.NEW
        # the connections are used only in worker threads, one at a time (their limiters)
        self._ops: sqlite3.Connection | None = None  # user operations
        self._bg: sqlite3.Connection | None = None  # renewals, reaping, polling
        self._ops_limiter: anyio.CapacityLimiter | None = None
        self._bg_limiter: anyio.CapacityLimiter | None = None
        self._file_id: tuple[int, int] = (0, 0)
        self._live: Liveness | None = None  # leases and lock files (bg thread)
        self._session_timeout = settings.session_timeout
        self._cursor = 0  # the last change-log id delivered (bg thread)
        self._data_version = -1  # PRAGMA data_version when the tables were read (bg thread)
        self._poke: anyio.Event | None = None  # wakes the poller (after our own writes)
        self._wake: anyio.Event | None = None  # wakes the renewer (session or file gone)
        self._reopen = False  # the file was replaced: open it again
        # the renewer and the poller, stopped alone by _abandon() and with the rest by aclose()
        self._loops: BackgroundTask | None = None
        # test hooks (SqliteDriver._freeze, _fail_next): a gate on all file access, injected errors
        self._injected = Injected()

    # --- threads ------------------------------------------------------------------------------

    async def _in_thread(
        self, limiter: anyio.CapacityLimiter | None, fn: Callable[..., T], *args: Any
    ) -> T:
        await self._injected.wait_thawed()  # test hook: _freeze()
        if self._state is not Lifecycle.STARTED or limiter is None:
            raise ConnectionLost(f"{self._path}: the driver is {self._state.value}, not started")
        try:
            return await anyio.to_thread.run_sync(fn, *args, limiter=limiter)
        except sqlite3.Error as exc:
            raise map_error(exc, self._path) from exc
        except OSError as exc:  # the lock files, or a stat of the database
            raise ConnectionLost(f"{self._path}: {exc}") from exc

    def _loop_time(self, monotonic: float) -> float:
        """Map a CLOCK_MONOTONIC reading onto anyio.current_time(), never later than it was."""
        return monotonic + loop_minus_monotonic()

    # --- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        if self._state is not Lifecycle.NEW:
            raise ConfigurationError(f"{self!r} was already started")
        self._ops_limiter = anyio.CapacityLimiter(1)
        self._bg_limiter = anyio.CapacityLimiter(1)
        try:
            # shielded: a session opened and then abandoned would hold its lock until exit;
            # a cancellation is delivered after start returns, inside ``async with``
            with anyio.CancelScope(shield=True):
                monotonic = await anyio.to_thread.run_sync(self._open, limiter=self._bg_limiter)
        except sqlite3.Error as exc:
            raise self._start_error(map_error(exc, self._path)) from exc
        except OSError as exc:
            raise self._start_error(os_error(exc, self._path, "open")) from exc
        except HAError as exc:
            raise self._start_error(exc) from exc
        self._state = Lifecycle.STARTED
        self._last_contact = self._loop_time(monotonic)
        self._connected = True
        self._poke = anyio.Event()
        self._wake = anyio.Event()
        self._loops = BackgroundTask(self._run_loops, name=f"sqlite loops {self._path}")
        self._loops.start()
        self._emit(ConnectionEvent(ConnectionState.CONNECTED, self._session_id))

    async def _run_loops(self) -> None:
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._renew_loop)
                tg.start_soon(self._poll_loop)
        except Exception:
            # a bug in a loop stops renewals: say so at once (the background task logs it)
            # rather than look connected while the lease runs out
            if self._connected:
                self._connected = False
                self._emit(ConnectionEvent(ConnectionState.DISCONNECTED, self._session_id))
            raise

    def _start_error(self, exc: HAError) -> HAError:
        self._state = Lifecycle.CLOSED
        # a busy or unreachable file at start is Unavailable; other errors say what is wrong
        return Unavailable(str(exc)) if isinstance(exc, ConnectionLost) else exc

    def _open(self) -> float:
        """Open the file and a session (worker thread). Returns the ``time.monotonic()`` its
        lease counts from."""
        clock.check()
        check_file(self._path)
        try:
            self._ops = connect(self._path, self._settings.busy_timeout, self._settings.synchronous)
            # renewals need no fsync: after a power loss no session survives anyway
            self._bg = connect(self._path, self._settings.busy_timeout, "NORMAL")
            instance = prepare(self._ops, self._path)
            self._file_id = file_id(self._path)
            self._live = Liveness(self._path, instance, self._settings.session_timeout)
            self._live.make_lock_dir()
            monotonic = self._open_session()
            self._cursor = tree.last_change(self._bg)
            return monotonic
        except BaseException:
            self._close_files()
            raise

    async def aclose(self) -> None:
        if self._state not in (Lifecycle.STARTED, Lifecycle.ABANDONED):
            self._state = Lifecycle.CLOSED
            return
        abandoned = self._state is Lifecycle.ABANDONED
        self._state = Lifecycle.CLOSING
        loops, self._loops = self._loops, None
        try:
            if loops is not None:
                await loops.stop()
        finally:
            if abandoned:  # _abandon() dropped the files; the session is left to the reapers
                self._state = Lifecycle.CLOSED
            else:
                await self._close_session()

    async def _close_session(self) -> None:
        with anyio.CancelScope(shield=True):
            sid = self._session_id
            self._session_id = None
            self._connected = False
            try:
                # the ops limiter waits for any operation still running on that connection
                await anyio.to_thread.run_sync(self._shutdown, sid, limiter=self._ops_limiter)
            finally:
                self._state = Lifecycle.CLOSED
                self._emit(ConnectionEvent(ConnectionState.CLOSED, sid))

    def _shutdown(self, sid: int | None) -> None:
        if sid is not None and self._bg is not None:
            try:
                with writing(self._bg):
                    tree.end_session(self._bg, sid)
            except sqlite3.Error as exc:  # our lock goes below: others will reap the session
                log.warning("%s: could not end session %s on close: %s", self._path, sid, exc)
        self._close_files()

    def _close_files(self, *, unlink: bool = True) -> None:
        """Close the connections and the lock files (``unlink=False``: leave our own file, as
        a killed process does)."""
        if self._live is not None:
            self._live.close(unlink=unlink)
        for conn in (self._ops, self._bg):
            if conn is not None:
                conn.close()
        self._ops = self._bg = None

    # --- session ------------------------------------------------------------------------------

    def _open_session(self) -> float:
        """Open a session on the open file (bg thread); returns its ``time.monotonic()``."""
        assert self._bg is not None and self._live is not None
        sid, now = self._live.open_session(self._bg)
        self._session_id = sid
        return now

    def _renew(self, sid: int) -> tuple[bool, float]:
        """Extend our lease (bg thread). False: the session is gone (its lock released)."""
        assert self._bg is not None and self._live is not None
        check_same_file(self._path, self._file_id)
        return self._live.renew(self._bg, sid)

    def _reopen_file(self) -> float:
        """Drop the connections to a replaced file and open the new one (bg thread)."""
        self._close_files()
        return self._open()

    async def _renew_loop(self) -> None:
        retry = min(self._settings.renew_interval, 0.1)
        due = self._last_contact + self._settings.renew_interval
        while True:
            assert self._wake is not None
            with anyio.CancelScope(deadline=due):
                await self._wake.wait()
            self._wake = anyio.Event()
            due = anyio.current_time() + retry  # unless we hear from the file below
            sid = self._session_id
            if self._reopen or sid is None:
                if await self._new_session():
                    due = self._last_contact + self._settings.renew_interval
                continue
            try:
                alive, monotonic = await self._in_thread(self._bg_limiter, self._renew, sid)
            except FileReplaced as exc:
                log.error("%s", exc)
                self._reopen = True
                self._lose_session(sid)
                due = anyio.current_time()
                continue
            except HAError as exc:
                if self._connected:
                    log.warning("%s: session %s lost contact: %s", self._path, sid, exc)
                    self._connected = False
                    self._emit(ConnectionEvent(ConnectionState.DISCONNECTED, sid))
                continue
            if alive:
                self._last_contact = self._loop_time(monotonic)
                due = self._last_contact + self._settings.renew_interval
                if not self._connected:
                    self._connected = True
                    self._emit(ConnectionEvent(ConnectionState.RECONNECTED, sid))
            else:
                log.warning("%s: session %s expired", self._path, sid)
                self._lose_session(sid)
                due = anyio.current_time()

    def _lose_session(self, sid: int) -> None:
        self._session_id = None
        self._connected = False
        self._emit(ConnectionEvent(ConnectionState.EXPIRED, sid))

    async def _new_session(self) -> bool:
        assert self._ops_limiter is not None
        try:
            if self._reopen:
                # borrow the ops connection's token too: no operation may use it meanwhile
                async with self._ops_limiter:
                    monotonic = await self._in_thread(self._bg_limiter, self._reopen_file)
                self._reopen = False
            else:
                monotonic = await self._in_thread(self._bg_limiter, self._open_session)
        except HAError as exc:
            log.warning("%s: cannot open a new session: %s", self._path, exc)
            return False
        self._last_contact = self._loop_time(monotonic)
        self._connected = True
        self._emit(ConnectionEvent(ConnectionState.CONNECTED, self._session_id))
        return True

    # --- polling: reaping dead sessions and node events ------------------------------------------

    async def _poll_loop(self) -> None:
        while True:
            assert self._poke is not None and self._wake is not None
            with anyio.move_on_after(self._settings.poll_interval):
                await self._poke.wait()
            self._poke = anyio.Event()
            try:
                events, own_gone = await self._in_thread(
                    self._bg_limiter, self._poll, self._session_id, self.watched_paths()
                )
            except FileReplaced:
                self._wake.set()
                continue
            except HAError as exc:  # the renewer reports contact; just try again
                log.debug("%s: poll failed: %s", self._path, exc)
                continue
            if own_gone:
                self._wake.set()  # our session was expired: let the renewer see to it now
            for path, kind in events:
                if path in self._subscribers:
                    self._emit(NodeEvent(path, NodeEventKind(kind)))
            if len(events) >= MAX_CHANGES_PER_POLL:
                self._poke.set()

    def _poll(self, own: int | None, watched: list[str]) -> tuple[list[tuple[str, str]], bool]:
        """Reap dead sessions, then read the changes after the cursor (bg thread).

        Returns the changes (path, kind) and whether our own session is gone. An idle poll
        costs a stat, ``PRAGMA data_version`` and one flock per other session: the tables
        are read only when another connection committed, or this one did.
        """
        conn, live = self._bg, self._live
        if conn is None or live is None:  # being reopened
            return [], False
        check_same_file(self._path, self._file_id)
        version = conn.execute("PRAGMA data_version").fetchone()[0]
        changed = version != self._data_version or live.dirty
        if changed:
            self._data_version = version
            live.refresh(conn)
        if not live.reap(conn, own) and not changed:
            return [], False  # nothing committed since the last poll, nobody died
        own_gone = own is not None and live.gone(own)
        events, self._cursor, resynced = tree.read_changes(
            conn, self._cursor, watched, MAX_CHANGES_PER_POLL
        )
        if resynced:
            log.warning("%s: change log trimmed past this poller; resyncing", self._path)
        elif len(events) == MAX_CHANGES_PER_POLL:
            self._data_version = -1  # more to read: look again at the next poll
        return events, own_gone
