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
(grant, keepalive, revoke) have a connection of their own: a keepalive never waits behind the
node operations of a busy driver (1,000 electors starting at once), whose queue could
otherwise outlast the third of the timeout a keepalive is given.

States: a keepalive that fails (no reply in time, connection refused) -> DISCONNECTED, and the
loop tries again every tenth of the timeout; the next one answered with a TTL -> RECONNECTED.
A reply without a TTL means etcd no longer has the lease -> EXPIRED, then a new grant ->
CONNECTED with the new ID. ``aclose`` revokes the lease, so the ephemeral nodes go at once.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import anyio

from ..._background import BackgroundTask
from ...errors import ConnectionLost, DriverError, SessionExpired, Unavailable
from .._faults import Injected
from ..base import ConnectionEvent, ConnectionState, Driver, SessionLease
from .gateway import Gateway
from .keys import KeySpace, b64
from .reads import ReadBatcher
from .settings import Settings

__all__ = ("EtcdSession",)

log = logging.getLogger("ha.drivers.etcd")


class EtcdSession(Driver):
    """A lease on one etcd cluster, renewed in the background."""

    def __init__(self, settings: Settings) -> None:
        super().__init__()
        self.settings = settings
        self.space = KeySpace(settings.prefix)
        self._gateway = Gateway(settings)
        self._lease_gateway = Gateway(settings)  # grant, keepalive, revoke: never queued
        self._reads = ReadBatcher(lambda body: self._request("kv/txn", body), settings.op_timeout)
        self._requested_timeout = settings.options.session_timeout
        self._session_timeout = settings.options.session_timeout
        self._lease = 0  # the current lease's ID; 0: none (not started, or between two)
        self._task: BackgroundTask | None = None
        self._closing = False
        self._wake = anyio.Event()  # renew now (an operation failed, a fault was lifted)
        self._start_revision = 0  # the store's revision when the session began
        # faults (faults.py): errors and a gate for operations; the client cut off, its
        # network silenced (an event set on heal), or its process gone
        self._injected = Injected()
        self._cut = False
        self._partitioned: anyio.Event | None = None
        self._crashed = False

    # --- requests ---------------------------------------------------------------------------

    async def _request(
        self,
        method: str,
        body: dict[str, Any],
        within: float | None = None,
        *,
        lease: bool = False,
    ) -> dict[str, Any]:
        """One request to etcd, as the client's faults let it through (``lease``: one of the
        lease's own, on its connection)."""
        within = within or self.settings.op_timeout
        if self._task is None or self._crashed:
            raise ConnectionLost("the etcd driver is not started (or closed)")
        if self._cut:
            raise ConnectionLost("the etcd driver is disconnected")
        if self._partitioned is not None:  # silence: no reply comes until heal
            partition = self._partitioned
            with anyio.move_on_after(within):
                await partition.wait()
            if not partition.is_set():
                raise ConnectionLost(f"no reply from etcd within {within:g} s")
        gateway = self._lease_gateway if lease else self._gateway
        return await gateway.call(method, body, within)

    async def _ranges(
        self, requests: list[dict[str, Any]], revision: int = 0, *, own: bool = False
    ) -> tuple[int, list[dict[str, Any]]]:
        """Several reads at one revision (``revision``, or now): the revision and each read's
        reply. In transactions of at most 100 (etcd's default limit is 128 operations), with
        other tasks' reads made at the same time (``reads``) unless pinned to a revision.
        ``own``: the driver's own reads (the watch's), which operations' faults leave alone,
        sent on their own."""
        replies: list[dict[str, Any]] = []
        for first in range(0, len(requests), 100):
            batch = requests[first : first + 100]
            if revision:
                batch = [
                    {"request_range": {**r["request_range"], "revision": str(revision)}}
                    for r in batch
                ]
            if own or revision:  # pinned reads alone: a compacted revision fails only them
                send = self._request if own else self._operation
                reply = await send("kv/txn", {"success": batch})
                header, responses = reply.get("header") or {}, reply.get("responses") or []
            else:
                header, responses = await self._coalesced(batch)
            revision = revision or int(header.get("revision") or 0)
            replies += [r.get("response_range") or {} for r in responses]
        return revision, replies

    async def _coalesced(self, ranges: list[dict[str, Any]]) -> tuple[dict[str, Any], list[Any]]:
        """A read made for a node operation, coalesced with others (``reads``)."""
        await self._injected.wait_thawed()
        self._injected.raise_next()
        try:
            return await self._reads.read(ranges)
        except (ConnectionLost, SessionExpired):
            self._wake.set()  # as _operation does
            raise

    async def _operation(self, method: str, body: dict[str, Any]) -> dict[str, Any]:
        """A request made for a node operation (not the session's own)."""
        await self._injected.wait_thawed()
        self._injected.raise_next()
        try:
            return await self._request(method, body)
        except (ConnectionLost, SessionExpired):
            self._wake.set()  # let the session loop find out what happened, now
            raise

    # --- lifecycle --------------------------------------------------------------------------

    async def start(self) -> None:
        if self._task is not None or self._closing:
            raise RuntimeError("driver already started")
        self._gateway.open()
        self._lease_gateway.open()
        self._task = BackgroundTask(self._run, name=f"etcd session at {self.settings.where}")
        connect_timeout = self.settings.options.connect_timeout
        last: ConnectionLost | None = None
        try:
            with anyio.move_on_after(connect_timeout):
                while True:
                    try:
                        await self._grant()
                        break
                    except ConnectionLost as exc:
                        last = exc
                        await anyio.sleep(0.1)
            if not self._lease:
                raise Unavailable(
                    f"could not reach etcd at {self.settings.where} within"
                    f" {connect_timeout:g} s (connect_timeout)"
                    + (f"; last: {last}" if last else "")
                )
        except BaseException:
            self._task = None
            await self._gateway.aclose()
            await self._lease_gateway.aclose()
            raise
        self._task.start()
        self._batching(True)  # before the task runs: the first requests wait for its senders
        self._emit(ConnectionEvent(ConnectionState.CONNECTED, self._lease))

    async def aclose(self) -> None:
        task, self._task = self._task, None
        if task is None:
            return
        self._closing = True
        # a close under cancellation still clears up (each step is bounded: the watch's end
        # by a second, the revoke by op_timeout): the lease and its nodes go at once
        with anyio.CancelScope(shield=True):
            await self._quiesce()
            await task.stop()
            self._batching(False)
            lease, had_session = self._lease, self._session_id is not None
            self._lease, self._session_id, self._connected = 0, None, False
            if lease and not self._crashed:
                try:  # its ephemeral nodes go with it, at once
                    await self._lease_gateway.call(
                        "lease/revoke", {"ID": str(lease)}, self.settings.op_timeout
                    )
                except DriverError as exc:
                    log.warning("could not revoke the etcd lease %x: %s", lease, exc)
            await self._gateway.aclose()
            await self._lease_gateway.aclose()
        self._closed()
        if had_session and not self._crashed:
            self._emit(ConnectionEvent(ConnectionState.CLOSED, None))

    async def _run(self) -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._watch_loop)
            tg.start_soon(self._reads.run)
            await self._renew_loop()

    def _batching(self, on: bool) -> None:
        """Open the batchers to requests (their senders run in the task), or close them."""
        if on:
            self._reads.open()
        else:
            self._reads.close()

    async def _watch_loop(self) -> None:
        """Hook: the node events' loop (watches.py)."""

    async def _quiesce(self) -> None:
        """Hook: the background tasks are about to be cancelled."""

    def _closed(self) -> None:
        """Hook: the driver is closed."""

    def _restart_watch(self) -> None:
        """Hook: contact is back (or a new session began): the watch should start afresh."""

    # --- the session ------------------------------------------------------------------------

    async def _grant(self) -> None:
        """Open a session: a new lease (CONNECTED is the caller's to report)."""
        sent = anyio.current_time()
        ttl = max(1, math.ceil(self._requested_timeout))
        reply = await self._request("lease/grant", {"TTL": ttl}, lease=True)
        lease, granted = int(reply.get("ID") or 0), int(reply.get("TTL") or 0)
        if not lease or granted <= 0:
            raise ConnectionLost(f"etcd granted no lease: {reply.get('error') or reply}")
        if granted > self._requested_timeout:
            log.warning(
                "etcd granted a lease TTL of %d s for a session timeout of %g s",
                granted,
                self._requested_timeout,
            )
        self._session_timeout = float(granted)
        self._lease = self._session_id = lease
        self._start_revision = int((reply.get("header") or {}).get("revision") or 0)
        self._last_contact = sent
        self._connected = True

    async def _renew_loop(self) -> None:
        while True:
            wait = self._session_timeout / (3 if self._connected else 10)
            with anyio.move_on_after(wait):
                await self._wake.wait()
            self._wake = anyio.Event()
            if not self._lease:
                try:
                    await self._grant()
                except DriverError:
                    continue
                self._emit(ConnectionEvent(ConnectionState.CONNECTED, self._lease))
                self._restart_watch()
            else:
                await self._renew()

    async def _renew(self) -> None:
        lease = self._lease
        sent = anyio.current_time()
        try:
            reply = await self._request(
                "lease/keepalive", {"ID": str(lease)}, self._session_timeout / 3, lease=True
            )
        except DriverError:
            self._lost_contact()
            return
        if lease != self._lease:
            return
        if int((reply.get("result") or {}).get("TTL") or 0) <= 0:
            # etcd no longer has the lease: the session is over with its ephemeral nodes
            self._lease, self._session_id, self._connected = 0, None, False
            self._emit(ConnectionEvent(ConnectionState.EXPIRED, lease))
            self._wake.set()  # a new session at once
            return
        if not await self._confirmed(reply):
            self._lost_contact()
            return
        self._last_contact = max(self._last_contact, sent)
        if not self._connected:
            self._connected = True
            self._emit(ConnectionEvent(ConnectionState.RECONNECTED, lease))
            self._restart_watch()

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
            reply = await self._request(
                "kv/range",
                {"key": b64(self.space.start), "count_only": True},
                self._session_timeout / 3,
                lease=True,
            )
        except DriverError:
            return False
        read = reply.get("header") or {}
        same = ("member_id", "raft_term")
        return all(header.get(k) is not None and header.get(k) == read.get(k) for k in same)

    async def session_lease(self, owner: int) -> SessionLease | None:
        """Another lease's time to live (``lease/timetolive``), None if etcd has no such lease.

        An estimate: etcd tells the TTL left in whole seconds, rounded down, so "renewed ago"
        (the granted TTL less what is left) may be up to a second more than it is, never
        less; and a new etcd leader restarts every lease's TTL, as if all were just renewed.
        """
        reply = await self._operation("lease/timetolive", {"ID": str(owner)})
        left = int(reply.get("TTL") or 0)  # proto3 JSON leaves out a zero
        granted = int(reply.get("grantedTTL") or 0)
        if left < 0 or granted <= 0:
            return None
        return SessionLease(float(granted - left), float(left), float(granted))

    def _lost_contact(self) -> None:
        if self._connected:
            self._connected = False
            self._emit(ConnectionEvent(ConnectionState.DISCONNECTED, self._session_id))
