"""The etcd driver's test hooks: the faults ``ha.testing.faults`` injects (and documents).

All of them act in the client, as a network or a process fault would, except ``_expire``,
which has etcd revoke the lease (what its expiry does). The client's requests pass through
``EtcdSession._request``, which is where a cut, a silence or a death stops them.
"""

from __future__ import annotations

from .._client_faults import ClientFaults
from .watches import Watches

__all__ = ("FaultHooks",)


class FaultHooks(ClientFaults, Watches):
    """The fault hooks, on an etcd session."""

    _backend_name = "etcd"

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

    async def _expire(self) -> None:
        """Test hook: etcd revokes the session's lease now (its ephemeral nodes go at once);
        the driver learns it from its next keepalive (EXPIRED, then CONNECTED with a new
        lease), which is sent at once."""
        lease = self._lease
        if not lease or self._task is None:
            raise RuntimeError("the etcd driver has no session to expire")
        await self._gateway.call("lease/revoke", {"ID": str(lease)}, self.settings.op_timeout)
        self._wake.set()
