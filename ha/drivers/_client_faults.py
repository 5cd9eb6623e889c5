"""The network and process faults of a driver whose session is kept by the client: an HTTP
client that renews a lease (etcd, Kubernetes).

Such a driver sends every request through one method that honours three flags: cut (fail at
once), partitioned (no answer until healed) and crashed (dead for good). The hooks here set
them alike on every such backend; what a session and its renewal are stays the driver's own
(its ``_expire``, and the ``_fail_next``/``_freeze`` docstrings, which say what a request is).
"""

from __future__ import annotations

from typing import Protocol

import anyio

from .._background import BackgroundTask
from ..errors import ConnectionLost

__all__ = ("ClientFaults",)


class _Session(Protocol):
    _task: BackgroundTask | None
    _cut: bool
    _partitioned: anyio.Event | None
    _crashed: bool
    _connected: bool
    _wake: anyio.Event

    @property
    def _backend_name(self) -> str: ...

    def _restart_watch(self) -> None: ...

    def _lost_contact(self) -> None: ...

    async def _quiesce(self) -> None: ...


class ClientFaults:
    """Disconnect, partition and crash, for a session class that has what ``_Session`` lists."""

    # set by the hooks (annotations only: the session class makes them)
    _cut: bool
    _partitioned: anyio.Event | None
    _crashed: bool
    _connected: bool

    def _disconnect(self: _Session) -> None:
        """Test hook: the connection drops now (DISCONNECTED at once): every request fails at
        once and the watch stops until ``_reconnect()``; the session ages on the server."""
        if self._task is None:
            raise ConnectionLost(f"the {self._backend_name} driver is not started (or closed)")
        self._cut = True
        self._restart_watch()
        self._lost_contact()

    def _reconnect(self: _Session) -> None:
        self._cut = False
        self._wake.set()

    def _partition(self: _Session) -> None:
        """Test hook: the network goes silent: requests get no answer (each fails when its
        time is up) and the watch hears nothing, until ``_heal()``. The driver notices when
        its renewals go unanswered."""
        if self._partitioned is None:
            self._partitioned = anyio.Event()
            self._restart_watch()

    def _heal(self: _Session) -> None:
        partitioned, self._partitioned = self._partitioned, None
        if partitioned is not None:
            partitioned.set()  # the requests held up go on
        self._wake.set()

    async def _crash(self: _Session) -> None:
        """Test hook: die without a goodbye, as a killed process does: no more renewals, no
        events, every request raises ``ConnectionLost``; the session stays on the server until
        it expires there. Returns once the background tasks have stopped."""
        if self._task is None or self._crashed:
            return
        self._crashed = True
        self._connected = False
        await self._quiesce()
        await self._task.stop()
