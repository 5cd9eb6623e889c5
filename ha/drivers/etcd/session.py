"""The etcd driver's session: one lease, kept alive, and the connection states it goes through.

Session = a lease. ``start`` grants one (``session_id`` is its ID) for the session timeout
rounded up to whole seconds; etcd may grant more (its minimum TTL), and the granted TTL is the
session timeout from then on. A background loop sends a keepalive every third of it, each
bounded by a third of it too.

Timing: etcd's leader expires a lease TTL seconds after it last renewed it, checked every
500 ms (so up to half a second later, never earlier), and it renews on a keepalive's arrival.
``last_contact`` is therefore the time a keepalive was *sent*, once its reply shows the lease
still alive (a TTL): never later than the server's renewal. A grant is dated the same way.
Other requests do not renew a lease and never move ``last_contact``. The lease's requests
(grant, keepalive, revoke) have a connection of their own (``transport``).

States: a keepalive that fails (no reply in time, connection refused) -> DISCONNECTED, and the
loop tries again every tenth of the timeout; the next one answered with a TTL -> RECONNECTED.
A reply without a TTL means etcd no longer has the lease -> EXPIRED, then a new grant ->
CONNECTED with the new ID. ``aclose`` revokes the lease, so the ephemeral nodes go at once.

The driver (``driver``) reads its session's state here; the requests go through its
``transport``, and the events out through the ``emit`` it hands over.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

import anyio

from ...errors import ConnectionLost, DriverError
from .._renewal import Renewal
from ..base import DriverEvent, SessionLease
from .keys import KeySpace, b64
from .settings import Settings
from .transport import Transport

__all__ = ("EtcdSession",)

log = logging.getLogger("ha.drivers.etcd")


class EtcdSession:
    """A lease on one etcd cluster, granted and kept alive; its states are ``state``'s
    (``Renewal``), whose loop ``state.run`` is."""

    def __init__(
        self,
        settings: Settings,
        transport: Transport,
        emit: Callable[[DriverEvent], None],
        restart_watch: Callable[[], None],
    ) -> None:
        self.settings = settings
        self._transport = transport
        self._requested_timeout = settings.options.session_timeout
        self._probe_key = b64(KeySpace(settings.prefix).start)  # read to confirm a keepalive
        self.state = Renewal(
            settings.options.session_timeout,
            open_session=self._grant,
            renew=self._renew,
            emit=emit,
            restart_watch=restart_watch,
            log=log,
        )
        self.start_revision = 0  # the store's revision when the session began

    @property
    def lease(self) -> int:
        """The current lease's ID; 0: none (not started, or between two)."""
        return self.state.id or 0

    async def open(self) -> None:
        """The first session, granted within the connect timeout, or ``Unavailable``."""
        where = f"etcd at {self.settings.where}"
        await self.state.first(self._grant, self.settings.options.connect_timeout, where)

    async def _grant(self) -> None:
        """Open a session: a new lease (CONNECTED is the caller's to report)."""
        sent = anyio.current_time()
        ttl = max(1, math.ceil(self._requested_timeout))
        reply = await self._transport.call("lease/grant", {"TTL": ttl}, lease=True)
        lease, granted = int(reply.get("ID") or 0), int(reply.get("TTL") or 0)
        if not lease or granted <= 0:
            raise ConnectionLost(f"etcd granted no lease: {reply.get('error') or reply}")
        if granted > self._requested_timeout:
            log.warning(
                "etcd granted a lease TTL of %d s for a session timeout of %g s",
                granted,
                self._requested_timeout,
            )
        self.state.timeout = float(granted)
        self.start_revision = int((reply.get("header") or {}).get("revision") or 0)
        self.state.opened(lease, sent)

    async def _renew(self) -> None:
        lease = self.lease
        sent = anyio.current_time()
        try:
            reply = await self._transport.call(
                "lease/keepalive", {"ID": str(lease)}, self.state.timeout / 3, lease=True
            )
        except DriverError:
            self.state.lost_contact()
            return
        if lease != self.lease:
            return
        if int((reply.get("result") or {}).get("TTL") or 0) <= 0:
            # etcd no longer has the lease: the session is over with its ephemeral nodes
            self.state.ended(lease)
            self.state.wake()  # a new session at once
            return
        if not await self._confirmed(reply):
            self.state.lost_contact()
            return
        self.state.renewed(sent)

    async def _confirmed(self, keepalive: dict[str, Any]) -> bool:
        """Whether a keepalive's renewal counts: a linearizable read, answered by the member
        that answered the keepalive in the same raft term, right after it.

        etcd-io/etcd#15247: a leader whose raft loop is stuck (a slow fdatasync) renews leases
        in its lessor and answers with a TTL, while the other members elect a leader that
        never hears of it and revokes the lease (seen on 3.4.23, ``tests/netns/README.md``).
        A linearizable read needs that term's leader to reach a quorum after the renewal, which
        a stuck leader cannot: its keepalives then count as no contact."""
        header = (keepalive.get("result") or {}).get("header") or {}
        try:  # bounded as the keepalive is; the contact stays dated by the keepalive's sending
            reply = await self._transport.call(
                "kv/range",
                {"key": self._probe_key, "count_only": True},
                self.state.timeout / 3,
                lease=True,
            )
        except DriverError:
            return False
        read = reply.get("header") or {}
        same = ("member_id", "raft_term")
        return all(header.get(k) is not None and header.get(k) == read.get(k) for k in same)

    async def lease_of(self, owner: int) -> SessionLease | None:
        """Another lease's time to live (``lease/timetolive``), None if etcd has no such lease.

        An estimate: etcd tells the TTL left in whole seconds, rounded down, so "renewed ago"
        (the granted TTL less what is left) may be up to a second more than it is, never
        less; and a new etcd leader restarts every lease's TTL, as if all were just renewed.
        """
        reply = await self._transport.operation("lease/timetolive", {"ID": str(owner)})
        left = int(reply.get("TTL") or 0)  # proto3 JSON leaves out a zero
        granted = int(reply.get("grantedTTL") or 0)
        if left < 0 or granted <= 0:
            return None
        return SessionLease(float(granted - left), float(left), float(granted))
