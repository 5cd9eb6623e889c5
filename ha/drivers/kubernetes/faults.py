"""The Kubernetes driver's test hooks: the faults ``ha.testing.faults`` injects (and documents).

All of them act in the client, as a network or a process fault would, except ``_expire``,
which takes the session's Lease away on the server and clears the session from the tree, as
a peer that reaped it does. The client's requests pass through ``KubernetesSession._request``,
which is where a cut, a silence or a death stops them.
"""

from __future__ import annotations

from ...errors import DriverError
from .._client_faults import ClientFaults
from .watches import Watches

__all__ = ("FaultHooks",)


class FaultHooks(ClientFaults, Watches):
    """The fault hooks, on a Kubernetes session."""

    _backend_name = "Kubernetes"

    def _fail_next(self, count: int = 1, *, transient: bool = True) -> None:
        """Test hook: the next ``count`` node operations fail before reaching the server,
        with ``ConnectionLost`` or, if not transient, ``AccessDenied``; renewals go on."""
        self._injected.fail_next(count, transient=transient)

    def _freeze(self) -> None:
        """Test hook: every node operation waits until ``_thaw()``; renewals, reaping and
        the watch go on, so the session lives (a stalled caller, not a stalled client)."""
        self._injected.freeze()

    def _thaw(self) -> None:
        self._injected.thaw()

    async def _expire(self) -> None:
        """Test hook: the session's Lease is deleted and the session struck off the tree with
        its ephemeral nodes, now (what a peer's reaping does); the driver learns it from its
        next renewal (EXPIRED, then CONNECTED with a new session), which is sent at once."""
        session = self._session_id
        if session is None or self._task is None:
            raise RuntimeError("the Kubernetes driver has no session to expire")
        status, _ = await self._api.call(
            "DELETE", self.lease_url(session), within=self.settings.op_timeout
        )
        if status not in (200, 202, 404):
            raise DriverError(f"could not delete the session's Lease ({status})")
        await self._clear(
            {session}, raw=True
        )  # from the server's side, whatever the client's faults
        self._wake.set()
