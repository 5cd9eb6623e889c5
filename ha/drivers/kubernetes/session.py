"""The Kubernetes driver's session: a Lease renewed by its owner, and the connection states.

Session = one ``coordination.k8s.io/v1`` Lease, ``NAME-ha-s-<id>``: ``holderIdentity`` is the
session id (63 random bits, in hex), ``leaseDurationSeconds`` the session timeout in whole
seconds (rounded up). ``start`` makes sure the tree's ConfigMap exists, creates the Lease,
then registers the session in the tree (``tree``: only registered sessions create ephemeral
nodes). A background loop renews the Lease every third of its duration: a PUT carrying the
Lease's uid and the resourceVersion last written, so that it fails (409) if anyone else
touched the Lease or if a peer reaped it. The uid is what refuses a reaped Lease: the API
server lets a PUT create a Lease that does not exist (the Lease strategy's
``AllowCreateOnUpdate``), ignoring its resourceVersion then, and checks a ``metadata.uid``
before anything else, against no uid at all when there is no Lease. Without it, a paused or
partitioned holder's late renewal would create its reaped Lease anew and bring back a session
its peers had struck off the tree.

Timing: nothing on the server expires a Lease. Peers do (``liveness``), from the moment they
*see* a renewal, which is after it was sent, for the duration the Lease itself states.
``last_contact`` is therefore the time a successful renewal (or the creation) was *sent*:
never later than any peer's view of it, which is the timing assumption of ``ha.drivers.base``.

States: a renewal that gets no answer -> DISCONNECTED (retried every tenth of the duration);
the next one that succeeds -> RECONNECTED. A 409 after which a read finds no Lease, or one
with another uid or holder (or a 404) -> EXPIRED, never a reconnection: the old session's
remains are cleared (struck off the tree with its ephemeral nodes, its Lease deleted if it is
still the one it created), and a new session opens (CONNECTED with the new id). ``aclose``
clears the session the same way, so its ephemeral nodes go at once.

The driver (``driver``) reads its session's state here; the requests go through its
``transport``, the tree's through its ``store``, and the events out through ``emit``.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import anyio

from ...errors import ConnectionLost, DriverError, SessionExpired
from .._renewal import Renewal
from ..base import DriverEvent, SessionLease
from .api import failure
from .store import TreeStore
from .transport import Transport
from .tree import MANAGED

__all__ = ("KubernetesSession", "micro_time")

log = logging.getLogger("ha.drivers.kubernetes")


def micro_time() -> str:
    """Now, as a Kubernetes MicroTime (RFC 3339, six fractional digits)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class KubernetesSession:
    """A Lease in one namespace, created and renewed; its states are ``state``'s
    (``Renewal``), whose loop ``state.run`` is."""

    def __init__(
        self,
        transport: Transport,
        store: TreeStore,
        emit: Callable[[DriverEvent], None],
        restart_watch: Callable[[], None],
    ) -> None:
        self.settings = settings = transport.settings
        self._transport = transport
        self._store = store
        requested = settings.options.session_timeout
        self.state = Renewal(
            float(settings.lease_seconds),
            open_session=self._open,
            renew=self._renew,
            emit=emit,
            restart_watch=restart_watch,
            log=log,
        )
        if self.state.timeout > requested:
            log.warning(
                "a Lease counts whole seconds: session timeout %g s raised to %d s",
                requested,
                settings.lease_seconds,
            )
        self._lease_version = ""  # our Lease's resourceVersion, as last written
        self._lease_uid = ""  # and its uid, as the server gave it when we created it
        self._acquired = ""  # when our Lease was created (MicroTime)

    async def open(self) -> None:
        """The tree's ConfigMap made sure of and the first session opened, within the
        connect timeout, or ``Unavailable``."""
        where = f"the Kubernetes API at {self._transport.server}"
        await self.state.first(self._open_first, self.settings.options.connect_timeout, where)

    async def _open_first(self) -> None:
        await self._store.ensure()
        await self._open()

    async def close(self, *, crashed: bool) -> int | None:
        """The driver closes: the session is over; unless ``crashed``, it is cleared (struck
        off the tree with its ephemeral nodes, its Lease deleted). Returns the session."""
        session = self.state.close()
        if session is not None and not crashed:
            try:
                with anyio.CancelScope(shield=True):
                    await self._store.clear({session})
                    await self._drop_lease(session, self._lease_uid)
            except DriverError as exc:
                log.warning("could not clear the Kubernetes session %x: %s", session, exc)
        return session

    def _lease_body(self, session: int, acquired: str) -> dict[str, Any]:
        metadata: dict[str, Any] = {
            "name": self.settings.lease(session),
            "namespace": self._transport.namespace,
            "labels": {**MANAGED, "ha.io/root": self.settings.name},
        }
        if self._lease_version:  # a renewal: of this very Lease (uid), unchanged since
            metadata["resourceVersion"] = self._lease_version
            metadata["uid"] = self._lease_uid
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": metadata,
            "spec": {
                "holderIdentity": f"{session:016x}",
                "leaseDurationSeconds": self.settings.lease_seconds,
                "acquireTime": acquired,
                "renewTime": micro_time(),
                "leaseTransitions": 0,
            },
        }

    async def _open(self) -> None:
        """Open a session: create its Lease, then register it (CONNECTED is the caller's)."""
        session = secrets.randbits(63) or 1
        self._lease_version, self._lease_uid, self._acquired = "", "", micro_time()
        sent = anyio.current_time()
        body = self._lease_body(session, self._acquired)
        status, reply = await self._transport.request(
            "POST", self._transport.leases_url, body, own=True
        )
        if status == 409:
            raise ConnectionLost("a session id was taken (try again)")
        if status != 201:
            raise failure(status, reply, "POST", "leases", self._transport.where)
        self._lease_version = str(reply["metadata"]["resourceVersion"])
        self._lease_uid = str(reply["metadata"]["uid"])
        try:
            await self._store.register(session)
        except BaseException:
            with anyio.CancelScope(shield=True), anyio.move_on_after(self.settings.op_timeout):
                try:
                    await self._drop_lease(session, self._lease_uid)
                except DriverError:
                    pass  # left for peers to reap
            raise
        self.state.opened(session, sent)

    async def _renew(self) -> None:
        session = self.state.id
        assert session is not None
        sent = anyio.current_time()
        body = self._lease_body(session, self._acquired)
        within = self.state.timeout / 3
        url = self._transport.lease_url(session)
        try:
            status, reply = await self._transport.request("PUT", url, body, within=within, own=True)
            if status == 409:  # ours still, if a renewal that timed out landed after all
                status, reply = await self._transport.request("GET", url, within=within, own=True)
                if status == 200 and self._ours(reply, session):
                    self._lease_version = str(reply["metadata"]["resourceVersion"])
                    self.state.wake()  # renew with it now; this one proves nothing
                    return
                status = 404  # reaped, or taken: this session is over
        except DriverError:
            self.state.lost_contact()
            return
        if session != self.state.id:
            return
        # (201: a server that ignored the uid created the Lease anew; the session is gone
        # all the same, and the new Lease, never registered, is left to the reapers)
        if status in (201, 404):
            await self._expired(session)
            return
        if status != 200:
            log.warning("%s", failure(status, reply, "PUT", "leases", self._transport.where))
            self.state.lost_contact()
            return
        self._lease_version = str(reply["metadata"]["resourceVersion"])
        self.state.renewed(sent)

    def _ours(self, lease: dict[str, Any], session: int) -> bool:
        """Whether ``lease`` is the very Lease this session created, still held by it."""
        uid = (lease.get("metadata") or {}).get("uid")
        holder = (lease.get("spec") or {}).get("holderIdentity")
        return uid == self._lease_uid and holder == f"{session:016x}"

    async def _drop_lease(self, session: int, uid: str) -> None:
        """Delete the session's Lease if it is the one created with ``uid`` (another one of
        that name is not this session's to delete: the server answers 409)."""
        options = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid}}
        await self._transport.request(
            "DELETE", self._transport.lease_url(session), options if uid else None, own=True
        )

    async def _expired(self, session: int) -> None:
        """The Lease was taken away: the session is over; clear what is left of it."""
        uid = self._lease_uid
        self.state.ended(session)
        try:
            await self._store.clear({session})
            await self._drop_lease(session, uid)
        except DriverError as exc:  # peers clear it: a registered session without a Lease
            log.debug("could not clear the expired session %x: %s", session, exc)
        self.state.wake()  # a new session at once

    async def lease_of(self, owner: int) -> SessionLease | None:
        """Another session's Lease: its ``renewTime`` against this host's wall clock, with the
        ``leaseDurationSeconds`` it states; None if the Lease is gone.

        An estimate, for display only: ``renewTime`` is the holder's wall clock, so the
        reading is off by the clock offset between the two hosts (nothing here depends on it:
        peers expire a Lease by their own monotonic clocks, ``liveness``, no sooner than the
        duration after they see it renewed, so "expires in" errs early, not late).
        """
        status, body = await self._transport.request("GET", self._transport.lease_url(owner))
        if status == 404:
            return None
        if status != 200:
            raise failure(status, body, "GET", "leases", self._transport.where)
        spec = body.get("spec") or {}
        duration = spec.get("leaseDurationSeconds")
        try:
            renewed = datetime.fromisoformat(str(spec.get("renewTime")))
        except ValueError:
            return None  # not one of our records
        if spec.get("holderIdentity") != f"{owner:016x}" or not isinstance(duration, int):
            return None
        ago = max(0.0, (datetime.now(UTC) - renewed).total_seconds())
        return SessionLease(ago, duration - ago, float(duration))

    def check(self) -> int:
        """The current session for an ephemeral create, or SessionExpired."""
        if self.state.id is None:
            raise SessionExpired("the Kubernetes driver has no session now (it is opening one)")
        return self.state.id
