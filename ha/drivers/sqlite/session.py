"""The sqlite driver's session on the ha file, kept by two loops in the driver's background task.

- the renewer extends the lease every ``renew_interval`` (``Liveness.renew``), reports
  DISCONNECTED / RECONNECTED as the file stops and starts answering, EXPIRED when the session
  is found gone, then CONNECTED with a new one; a file deleted or replaced is opened again;
- the poller, every ``poll_interval`` and right after the driver's own writes, ends the
  sessions of dead processes and run-out leases (``Liveness.reap``) and delivers the node
  events of the change log (``tree.read_changes``).

The file and its worker threads are the driver's ``files``; the driver reads its session's
state here, and the events go out through the ``emit`` it hands over.
"""

from __future__ import annotations

import logging
import math
import sqlite3
from collections.abc import Callable

import anyio
import anyio.to_thread

from ..._clock import loop_minus_monotonic
from ...errors import HAError
from ..base import ConnectionEvent, ConnectionState, DriverEvent, NodeEvent, NodeEventKind
from . import tree
from .files import Files
from .schema import FileReplaced, check_same_file, writing

__all__ = ("MAX_CHANGES_PER_POLL", "FileSession")

log = logging.getLogger("ha.drivers.sqlite")

MAX_CHANGES_PER_POLL = 1_000


def loop_time(monotonic: float) -> float:
    """Map a CLOCK_MONOTONIC reading onto anyio.current_time(), never later than it was."""
    return monotonic + loop_minus_monotonic()


class FileSession:
    """One session at a time on the file of ``files``; ``watched()``: the paths subscribed."""

    def __init__(
        self,
        files: Files,
        emit: Callable[[DriverEvent], None],
        watched: Callable[[], list[str]],
    ) -> None:
        self._files = files
        self._settings = files.settings
        self._path = files.path
        self._send_event = emit
        self._watched = watched
        self.id: int | None = None
        self.timeout = files.settings.session_timeout
        self.last_contact = -math.inf
        self.connected = False
        self._cursor = 0  # the last change-log id delivered (bg thread)
        self._data_version = -1  # PRAGMA data_version when the tables were read (bg thread)
        self._poke: anyio.Event | None = None  # wakes the poller (after our own writes)
        self._wake: anyio.Event | None = None  # wakes the renewer (session or file gone)
        self._reopen = False  # the file was replaced: open it again

    def poke(self) -> None:
        """Deliver our own changes' events without waiting a poll."""
        if self._poke is not None:
            self._poke.set()

    def started(self, monotonic: float) -> None:
        """The file and the first session are open (``open``'s reading): the loops may run."""
        self.last_contact = loop_time(monotonic)
        self.connected = True
        self._poke = anyio.Event()
        self._wake = anyio.Event()

    # --- the file (worker threads) ------------------------------------------------------------

    def open(self) -> float:
        """Open the file and a session (worker thread). Returns the ``time.monotonic()`` its
        lease counts from."""
        self._files.open()
        try:
            monotonic = self._open_session()
            assert self._files.bg is not None
            self._cursor = tree.last_change(self._files.bg)
            return monotonic
        except BaseException:
            self._files.close()
            raise

    def shutdown(self, sid: int | None) -> None:
        """End session ``sid`` and close the file (worker thread)."""
        bg = self._files.bg
        if sid is not None and bg is not None:
            try:
                with writing(bg):
                    tree.end_session(bg, sid)
            except sqlite3.Error as exc:  # our lock goes below: others will reap the session
                log.warning("%s: could not end session %s on close: %s", self._path, sid, exc)
        self._files.close()

    def _open_session(self) -> float:
        """Open a session on the open file (bg thread); returns its ``time.monotonic()``."""
        bg, live = self._files.bg, self._files.live
        assert bg is not None and live is not None
        sid, now = live.open_session(bg)
        self.id = sid
        return now

    def _renew(self, sid: int) -> tuple[bool, float]:
        """Extend our lease (bg thread). False: the session is gone (its lock released)."""
        bg, live = self._files.bg, self._files.live
        assert bg is not None and live is not None
        check_same_file(self._path, self._files.file_id)
        return live.renew(bg, sid)

    def _reopen_file(self) -> float:
        """Drop the connections to a replaced file and open the new one (bg thread)."""
        self._files.close()
        return self.open()

    # --- the loops ----------------------------------------------------------------------------

    async def run(self) -> None:
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._renew_loop)
                tg.start_soon(self._poll_loop)
        except Exception:
            # a bug in a loop stops renewals: say so at once (the background task logs it)
            # rather than look connected while the lease runs out
            if self.connected:
                self.connected = False
                self._send_event(ConnectionEvent(ConnectionState.DISCONNECTED, self.id))
            raise

    async def _renew_loop(self) -> None:
        retry = min(self._settings.renew_interval, 0.1)
        due = self.last_contact + self._settings.renew_interval
        while True:
            assert self._wake is not None
            with anyio.CancelScope(deadline=due):
                await self._wake.wait()
            self._wake = anyio.Event()
            due = anyio.current_time() + retry  # unless we hear from the file below
            sid = self.id
            if self._reopen or sid is None:
                if await self._new_session():
                    due = self.last_contact + self._settings.renew_interval
                continue
            try:
                alive, monotonic = await self._files.in_thread(
                    self._files.bg_limiter, self._renew, sid
                )
            except FileReplaced as exc:
                log.error("%s", exc)
                self._reopen = True
                self._lose_session(sid)
                due = anyio.current_time()
                continue
            except HAError as exc:
                if self.connected:
                    log.warning("%s: session %s lost contact: %s", self._path, sid, exc)
                    self.connected = False
                    self._send_event(ConnectionEvent(ConnectionState.DISCONNECTED, sid))
                continue
            if alive:
                self.last_contact = loop_time(monotonic)
                due = self.last_contact + self._settings.renew_interval
                if not self.connected:
                    self.connected = True
                    self._send_event(ConnectionEvent(ConnectionState.RECONNECTED, sid))
            else:
                log.warning("%s: session %s expired", self._path, sid)
                self._lose_session(sid)
                due = anyio.current_time()

    def _lose_session(self, sid: int) -> None:
        self.id = None
        self.connected = False
        self._send_event(ConnectionEvent(ConnectionState.EXPIRED, sid))

    async def _new_session(self) -> bool:
        assert self._files.ops_limiter is not None
        try:
            if self._reopen:
                # borrow the ops connection's token too: no operation may use it meanwhile
                async with self._files.ops_limiter:
                    monotonic = await self._files.in_thread(
                        self._files.bg_limiter, self._reopen_file
                    )
                self._reopen = False
            else:
                monotonic = await self._files.in_thread(self._files.bg_limiter, self._open_session)
        except HAError as exc:
            log.warning("%s: cannot open a new session: %s", self._path, exc)
            return False
        self.last_contact = loop_time(monotonic)
        self.connected = True
        self._send_event(ConnectionEvent(ConnectionState.CONNECTED, self.id))
        return True

    # --- polling: reaping dead sessions and node events ------------------------------------------

    async def _poll_loop(self) -> None:
        while True:
            assert self._poke is not None and self._wake is not None
            with anyio.move_on_after(self._settings.poll_interval):
                await self._poke.wait()
            self._poke = anyio.Event()
            try:
                events, own_gone = await self._files.in_thread(
                    self._files.bg_limiter, self._poll, self.id, self._watched()
                )
            except FileReplaced:
                self._wake.set()
                continue
            except HAError as exc:  # the renewer reports contact; just try again
                log.debug("%s: poll failed: %s", self._path, exc)
                continue
            if own_gone:
                self._wake.set()  # our session was expired: let the renewer see to it now
            watched = set(self._watched())  # as it is now, after the poll
            for path, kind in events:
                if path in watched:
                    self._send_event(NodeEvent(path, NodeEventKind(kind)))
            if len(events) >= MAX_CHANGES_PER_POLL:
                self._poke.set()

    def _poll(self, own: int | None, watched: list[str]) -> tuple[list[tuple[str, str]], bool]:
        """Reap dead sessions, then read the changes after the cursor (bg thread).

        Returns the changes (path, kind) and whether our own session is gone. An idle poll
        costs a stat, ``PRAGMA data_version`` and one flock per other session: the tables
        are read only when another connection committed, or this one did.
        """
        conn, live = self._files.bg, self._files.live
        if conn is None or live is None:  # being reopened
            return [], False
        check_same_file(self._path, self._files.file_id)
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
