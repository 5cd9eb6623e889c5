"""The etcd driver's test hooks: the faults ``ha.testing.faults`` injects (and documents).

All of them act in the client, as a network or a process fault would, except ``_expire``,
which has etcd revoke the lease (what its expiry does). The client's requests pass through
``EtcdSession._request``, which is where a cut, a silence or a death stops them.
"""

from __future__ import annotations

import anyio

from ...errors import ConnectionLost
from .watches import Watches

__all__ = ("FaultHooks",)


class FaultHooks(Watches):
    """The fault hooks, on an etcd session."""

    def _fail_next(self, count: int = 1, *, transient: bool = True) -> None:
        """Test hook: the next ``count`` node operations fail before reaching etcd, with
        ``ConnectionLost`` or, if not transient, ``AccessDenied``; keepalives go on."""
        self._injected.fail_next(count, transient=transient)

    def _freeze(self) -> None:
        """Test hook: every node operation waits until ``_thaw()``; keepalives and the watch
        go on, so the session lives (a stalled caller, not a stalled client)."""
        self._injected.freeze()

    def _thaw(self) -> None:
        self._injected.thaw()

    def _disconnect(self) -> None:
        """Test hook: the connection drops now (DISCONNECTED at once): every request fails
        at once and the watch stops until ``_reconnect()``; the lease ages on etcd."""
        if self._task is None:
            raise ConnectionLost("the etcd driver is not started (or closed)")
        self._cut = True
        self._restart_watch()
        self._lost_contact()

    def _reconnect(self) -> None:
        self._cut = False
        self._wake.set()

    def _partition(self) -> None:
        """Test hook: the network goes silent: requests get no reply (each fails when its
        time is up) and the watch hears nothing, until ``_heal()``. The driver notices when
        its keepalives go unanswered."""
        if self._partitioned is None:
            self._partitioned = anyio.Event()
            self._restart_watch()

    def _heal(self) -> None:
        partitioned, self._partitioned = self._partitioned, None
        if partitioned is not None:
            partitioned.set()  # the requests held up go on
        self._wake.set()

    async def _crash(self) -> None:
        """Test hook: die without a goodbye, as a killed process does: no more keepalives,
        no events, every request raises ``ConnectionLost``; the lease lives on until etcd
        expires it. Returns once the background tasks have stopped."""
        if self._task is None or self._crashed:
            return
        self._crashed = True
        self._connected = False
        await self._quiesce()
        await self._task.stop()

    async def _expire(self) -> None:
        """Test hook: etcd revokes the session's lease now (its ephemeral nodes go at once);
        the driver learns it from its next keepalive (EXPIRED, then CONNECTED with a new
        lease), which is sent at once."""
        lease = self._lease
        if not lease or self._task is None:
            raise RuntimeError("the etcd driver has no session to expire")
        await self._gateway.call("lease/revoke", {"ID": str(lease)}, self.settings.op_timeout)
        self._wake.set()
