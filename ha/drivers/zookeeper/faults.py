"""The ZooKeeper driver's test hooks: the faults ``ha.testing.faults`` injects (and documents).

A request gate and injected errors (``_freeze``, ``_fail_next``), a held disconnection
(``_disconnect``/``_reconnect``), a death without a goodbye (``_crash``), and an expiry made by
the server (``_expire``). They reach into kazoo's client where it has no public way.
"""

from __future__ import annotations

import functools
import threading
from typing import Any

import anyio
from kazoo import exceptions as kx
from kazoo.client import KazooClient

from ...errors import ConnectionLost
from ..base import ConnectionEvent, ConnectionState
from .session import KazooSession
from .settings import Options

__all__ = ("FaultHooks",)


class FaultHooks(KazooSession):
    """The fault hooks, on a kazoo session."""

    def __init__(self, hosts: str, chroot: str, options: Options) -> None:
        super().__init__(hosts, chroot, options)
        self._uncut = threading.Event()  # kazoo's connection attempts wait while clear
        self._uncut.set()

    def _fail_next(self, count: int = 1, *, transient: bool = True) -> None:
        """Test hook: the next ``count`` requests (the driver's own syncs too) fail before
        reaching ZooKeeper, with ``ConnectionLost`` or, if not transient, ``AccessDenied``."""
        self._injected.fail_next(count, transient=transient)

    def _freeze(self) -> None:
        """Test hook: every request (the driver's own syncs too) waits until ``_thaw()``;
        kazoo's pings go on, so the session lives."""
        self._injected.freeze()

    def _thaw(self) -> None:
        self._injected.thaw()

    def _disconnect(self) -> None:
        """Test hook: drop the connection now (DISCONNECTED at once) and hold kazoo's attempts
        to connect again until ``_reconnect()``; the session ages on the server meanwhile."""
        client = self._client
        if client is None or self._closing:
            raise ConnectionLost("the ZooKeeper driver is not started (or closed)")
        self._uncut.clear()
        self._hold_connects(client)
        if client.connected:
            # kazoo's own testing sentinel: its connection thread drops the socket on it
            from kazoo.protocol.connection import _CONNECTION_DROP

            client._call(_CONNECTION_DROP, None)
        if self._connected:  # kazoo's SUSPENDED, when it comes, then changes nothing
            self._connected = False
            self._emit(ConnectionEvent(ConnectionState.DISCONNECTED, self._session_id))

    def _reconnect(self) -> None:
        self._uncut.set()

    def _hold_connects(self, client: Any) -> None:
        """Make kazoo's connection thread wait, before each attempt to connect, while a test
        keeps the driver disconnected (installed once, by the first ``_disconnect``)."""
        handler: Any = client._connection
        if getattr(handler, "_ha_held", False):
            return
        connect, uncut = handler._connect, self._uncut

        @functools.wraps(connect)
        def held_connect(*args: Any, **kwargs: Any) -> Any:
            while not uncut.wait(0.05):
                if client._stopped.is_set():
                    raise kx.ConnectionDropped("the client stops while held disconnected")
            return connect(*args, **kwargs)

        handler._connect = held_connect  # outside _date_connects': dated when it really starts
        handler._ha_held = True

    async def _crash(self) -> None:
        """Test hook: die without a goodbye, as a killed process does. kazoo's connection
        drops without a CloseRequest and is not made again (the server expires the session
        when its timeout runs out); no more events; every later request raises
        ``ConnectionLost``. Returns once kazoo's threads have ended."""
        client = self._client
        if client is None or self._closing:
            return
        self._closing = True  # what kazoo still reports is not passed on
        self._connected = False
        client.remove_listener(self._kazoo_state)
        from kazoo.protocol.connection import _CONNECTION_DROP

        def die() -> None:
            client._stopped.set()  # no new connection; stop() then sends no CloseRequest
            if client.connected:
                client._call(_CONNECTION_DROP, None)
            client._connection.connection_stopped.wait(10)
            client._safe_close()  # the callback threads (what stop() would have done)

        await anyio.to_thread.run_sync(die)

    async def _expire(self, hosts: str | None = None) -> None:
        """Test hook: have ZooKeeper expire the current session now. A second client joins it
        with its id and password, then closes it: the server ends the session (its ephemeral
        nodes go at once) and this driver learns it at its next contact (DISCONNECTED,
        EXPIRED, then CONNECTED with a new session). ``hosts``: the server's, when the
        driver's own go through a fault proxy."""
        client = self._client
        client_id = client.client_id if client is not None and not self._closing else None
        if client_id is None:
            raise RuntimeError("the ZooKeeper driver has no session to expire")

        def join_and_close() -> None:
            other = KazooClient(hosts=hosts or self.hosts, client_id=client_id, timeout=2.0)
            other.start(timeout=10)
            other.stop()
            other.close()

        await anyio.to_thread.run_sync(join_and_close)
