"""The connection states of a session its client keeps by renewing a lease (etcd,
Kubernetes), and the loop that renews it: written once for both.

The backend's session part hands over two coroutines: ``open_session`` (a new lease and
session, which calls ``opened``) and ``renew`` (one renewal of the current one, which calls
``renewed``, ``lost_contact`` or ``ended`` by what it hears). ``Renewal`` keeps the state the
driver's properties read (``id``, ``timeout``, ``last_contact``, ``connected``) and reports
its changes: CONNECTED with each new session, DISCONNECTED when a renewal goes unanswered,
RECONNECTED when one is answered again, EXPIRED when the lease is gone.

Timing: a renewal every third of the timeout while connected, every tenth while not, or at
once on ``wake()`` (an operation lost contact, a fault was lifted, the session ended).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable

import anyio

from ..errors import ConnectionLost, DriverError, Unavailable
from .base import ConnectionEvent, ConnectionState, DriverEvent

__all__ = ("Renewal",)


class Renewal:
    """One renewed session's state and loop. ``restart_watch``: contact is back (or a new
    session began), the watch should start afresh."""

    def __init__(
        self,
        timeout: float,
        *,
        open_session: Callable[[], Awaitable[None]],
        renew: Callable[[], Awaitable[None]],
        emit: Callable[[DriverEvent], None],
        restart_watch: Callable[[], None],
        log: logging.Logger,
    ) -> None:
        self.id: int | None = None  # the current session; None: none (not yet, or between)
        self.timeout = timeout  # asked for, or as the backend granted it
        self.last_contact = -math.inf
        self.connected = False
        self._open_session = open_session
        self._renew = renew
        self._send_event = emit
        self._restart_watch = restart_watch
        self._log = log
        self._wake = anyio.Event()  # renew now

    def wake(self) -> None:
        self._wake.set()

    async def first(
        self, open_first: Callable[[], Awaitable[None]], within: float, where: str
    ) -> None:
        """The first session, opened by ``open_first`` and tried again on ConnectionLost for
        ``within`` seconds (connect_timeout), or ``Unavailable`` naming ``where``."""
        last: ConnectionLost | None = None
        with anyio.move_on_after(within):
            while True:
                try:
                    await open_first()
                    break
                except ConnectionLost as exc:
                    last = exc
                    await anyio.sleep(0.1)
        if self.id is None:
            raise Unavailable(
                f"could not reach {where} within {within:g} s (connect_timeout)"
                + (f"; last: {last}" if last else "")
            )

    async def run(self) -> None:
        """Renew until cancelled; a new session at once when the last one ended."""
        while True:
            wait = self.timeout / (3 if self.connected else 10)
            with anyio.move_on_after(wait):
                await self._wake.wait()
            self._wake = anyio.Event()
            if self.id is None:
                try:
                    await self._open_session()
                except DriverError as exc:
                    self._log.debug("could not open a session: %s", exc)
                    continue
                self._send_event(ConnectionEvent(ConnectionState.CONNECTED, self.id))
                self._restart_watch()
            else:
                await self._renew()

    # --- what the backend's part heard ----------------------------------------------------------

    def opened(self, session: int, sent: float) -> None:
        """A new session, granted to a request sent at ``sent`` (CONNECTED is the caller's
        to report: ``run``'s, or the driver's start)."""
        self.id = session
        self.last_contact = sent
        self.connected = True

    def renewed(self, sent: float) -> None:
        """A renewal sent at ``sent`` was answered: the session lives."""
        self.last_contact = max(self.last_contact, sent)
        if not self.connected:
            self.connected = True
            self._send_event(ConnectionEvent(ConnectionState.RECONNECTED, self.id))
            self._restart_watch()

    def lost_contact(self) -> None:
        if self.connected:
            self.connected = False
            self._send_event(ConnectionEvent(ConnectionState.DISCONNECTED, self.id))

    def ended(self, session: int) -> None:
        """The backend no longer has ``session``: EXPIRED (``wake()`` for a new one)."""
        self.id, self.connected = None, False
        self._send_event(ConnectionEvent(ConnectionState.EXPIRED, session))

    def close(self) -> int | None:
        """The driver closes: the session it had, if any."""
        session, self.id, self.connected = self.id, None, False
        return session
