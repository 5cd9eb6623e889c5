"""The ZooKeeper driver's faults for ``ha.testing.faults``.

A request gate and injected errors (``freeze``, ``fail_next``: the session's ``FaultGate``), a
held disconnection (``disconnect``/``reconnect``), a death without a goodbye (``crash``), and
an expiry made by the server (``expire``). They reach into kazoo's client where it has no
public way. kazoo's socket cannot be silenced from inside the client: no partition.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Mapping
from typing import Any

import anyio
from kazoo import exceptions as kx
from kazoo.client import KazooClient

from ...errors import ConnectionLost
from .session import KazooSession

__all__ = ("ZooKeeperFaults",)

_NO_SILENCE = (
    "kazoo's socket cannot be silenced from inside the client; put a TCP proxy (pause it) or"
    " a firewall rule between the driver and the server"
)


class ZooKeeperFaults:
    """``FaultHooks`` of one ZooKeeper driver's session (one per driver: a disconnection
    holds kazoo's attempts to connect until ``reconnect``)."""

    backend = "zookeeper"
    cannot: Mapping[str, str] = {"partition": _NO_SILENCE, "heal": _NO_SILENCE}

    def __init__(self, session: KazooSession) -> None:
        self.session = session
        self.gate = session.gate
        self._uncut = threading.Event()  # kazoo's connection attempts wait while clear
        self._uncut.set()

    def fail_next(self, count: int = 1, *, transient: bool = True) -> None:
        """The next ``count`` requests (the driver's own syncs too) fail before reaching
        ZooKeeper, with ``ConnectionLost`` or, if not transient, ``AccessDenied``."""
        self.gate.fail_next(count, transient=transient)

    def freeze(self) -> None:
        """Every request (the driver's own syncs too) waits until ``thaw()``; kazoo's pings
        go on, so the session lives."""
        self.gate.freeze()

    def thaw(self) -> None:
        self.gate.thaw()

    def partition(self) -> None:
        raise NotImplementedError(_NO_SILENCE)

    def heal(self) -> None:
        raise NotImplementedError(_NO_SILENCE)

    def disconnect(self) -> None:
        """Drop the connection now (DISCONNECTED at once) and hold kazoo's attempts to connect
        again until ``reconnect()``; the session ages on the server meanwhile."""
        client = self.session.client
        if client is None or self.session.closing:
            raise ConnectionLost("the ZooKeeper driver is not started (or closed)")
        self._uncut.clear()
        self._hold_connects(client)
        if client.connected:
            # kazoo's own testing sentinel: its connection thread drops the socket on it
            from kazoo.protocol.connection import _CONNECTION_DROP

            client._call(_CONNECTION_DROP, None)
        self.session.lost_contact()

    def reconnect(self) -> None:
        self._uncut.set()

    def _hold_connects(self, client: Any) -> None:
        """Make kazoo's connection thread wait, before each attempt to connect, while a test
        keeps the driver disconnected (installed once per client, by the first
        ``disconnect``)."""
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

        handler._connect = held_connect  # outside the session's dating: dated when it starts
        handler._ha_held = True

    async def crash(self) -> None:
        """Die without a goodbye, as a killed process does. kazoo's connection drops without
        a CloseRequest and is not made again (the server expires the session when its
        timeout runs out); no more events; every later request raises ``ConnectionLost``.
        Returns once kazoo's threads have ended."""
        client = self.session.abandon()
        if client is None:
            return
        from kazoo.protocol.connection import _CONNECTION_DROP

        def die() -> None:
            client._stopped.set()  # no new connection; stop() then sends no CloseRequest
            if client.connected:
                client._call(_CONNECTION_DROP, None)
            client._connection.connection_stopped.wait(10)
            client._safe_close()  # the callback threads (what stop() would have done)

        await anyio.to_thread.run_sync(die)

    async def expire(self, hosts: str | None = None) -> None:
        """Have ZooKeeper expire the current session now. A second client joins it with its
        id and password, then closes it: the server ends the session (its ephemeral nodes go
        at once) and this driver learns it at its next contact (DISCONNECTED, EXPIRED, then
        CONNECTED with a new session). ``hosts``: the server's, when the driver's own go
        through a fault proxy."""
        client = self.session.client
        client_id = client.client_id if client is not None and not self.session.closing else None
        if client_id is None:
            raise RuntimeError("the ZooKeeper driver has no session to expire")

        def join_and_close() -> None:
            other = KazooClient(hosts=hosts or self.session.hosts, client_id=client_id, timeout=2.0)
            other.start(timeout=10)
            other.stop()
            other.close()

        await anyio.to_thread.run_sync(join_and_close)
