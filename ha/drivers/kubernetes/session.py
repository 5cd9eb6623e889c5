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
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import anyio

from ..._background import BackgroundTask
from ...errors import ConnectionLost, DriverError, SessionExpired, Unavailable
from .._faults import Injected
from ..base import ConnectionEvent, ConnectionState, Driver, SessionLease
from .api import COORDINATION, CORE, Api, failure
from .config import Cluster, load
from .settings import Settings
from .tree import MANAGED, Tree, reap

__all__ = ("KubernetesSession", "micro_time")

log = logging.getLogger("ha.drivers.kubernetes")
ATTEMPTS = 100  # writes of one tree update, while other drivers keep writing it


def micro_time() -> str:
    """Now, as a Kubernetes MicroTime (RFC 3339, six fractional digits)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class KubernetesSession(Driver):
    """A Lease in one namespace, renewed in the background, and the tree's ConfigMap."""

    def __init__(self, settings: Settings, cluster: Cluster | None = None) -> None:
        super().__init__()
        self.settings = settings
        self.cluster = cluster or load(settings.options.kubeconfig, settings.options.context)
        self.namespace = settings.namespace or self.cluster.namespace or "default"
        self._api = Api(self.cluster)
        requested = settings.options.session_timeout
        self._session_timeout = float(settings.lease_seconds)
        if self._session_timeout > requested:
            log.warning(
                "a Lease counts whole seconds: session timeout %g s raised to %d s",
                requested,
                settings.lease_seconds,
            )
        self._lease_version = ""  # our Lease's resourceVersion, as last written
        self._lease_uid = ""  # and its uid, as the server gave it when we created it
        self._acquired = ""  # when our Lease was created (MicroTime)
        self._started = False  # between start and the end of aclose: requests may go
        self._known = Tree()  # the tree as the watch last saw it (watches.py)
        self._task: BackgroundTask | None = None
        self._closing = False
        self._wake = anyio.Event()  # renew now (an operation failed, a fault was lifted)
        # faults (faults.py): errors and a gate for operations; the client cut off, its
        # network silenced (an event set on heal), or its process gone
        self._injected = Injected()
        self._cut = False
        self._partitioned: anyio.Event | None = None
        self._crashed = False

    # --- where things are -------------------------------------------------------------------

    @property
    def where(self) -> str:
        return f"namespace {self.namespace}"

    @property
    def tree_url(self) -> str:
        return f"{CORE}/namespaces/{self.namespace}/configmaps/{self.settings.tree}"

    @property
    def leases_url(self) -> str:
        return f"{COORDINATION}/namespaces/{self.namespace}/leases"

    def lease_url(self, session: int) -> str:
        return f"{self.leases_url}/{self.settings.lease(session)}"

    # --- requests ---------------------------------------------------------------------------

    async def _request(
        self,
        method: str,
        url: str,
        body: Any = None,
        *,
        within: float | None = None,
        params: dict[str, str] | None = None,
        own: bool = False,
        raw: bool = False,
        content_type: str | None = None,  # a PATCH's media type
    ) -> tuple[int, dict[str, Any]]:
        """One request, as the client's faults let it through. ``own``: the driver's own
        (renewals, watch, reaping), which the faults of operations leave alone; ``raw``: made
        as from the server's side (a test's fault), which no fault of the client stops."""
        within = within or self.settings.op_timeout
        if raw:
            return await self._api.call(method, url, body, within=within, params=params)
        if not own:
            await self._injected.wait_thawed()
            self._injected.raise_next()
        try:
            if not self._started or self._crashed:
                raise ConnectionLost("the Kubernetes driver is not started (or closed)")
            if self._cut:
                raise ConnectionLost("the Kubernetes driver is disconnected")
            if self._partitioned is not None:  # silence: no answer comes until heal
                partition = self._partitioned
                with anyio.move_on_after(within):
                    await partition.wait()
                if not partition.is_set():
                    raise ConnectionLost(f"no answer from Kubernetes within {within:g} s")
            return await self._api.call(
                method, url, body, within=within, params=params, content_type=content_type
            )
        except ConnectionLost:
            if not own:
                self._wake.set()  # let the session loop find out what happened, now
            raise

    async def _read_tree(self, *, own: bool = False, raw: bool = False) -> Tree:
        status, body = await self._request("GET", self.tree_url, own=own, raw=raw)
        if status == 200:
            return Tree.decode(body, self.tree_url)
        if status == 404 and (body.get("details") or {}).get("kind") != "namespaces":
            raise DriverError(
                f"the ha tree ConfigMap {self.settings.tree} in {self.where} was deleted"
                " (its epochs with it): the election cannot go on safely"
            )
        raise failure(status, body, "GET", "configmaps", self.where)

    async def _write_tree(self, tree: Tree, *, own: bool = False, raw: bool = False) -> Tree | None:
        """PUT ``tree`` if the ConfigMap is still at the version it was read at: the tree as
        written, or None on a conflict (someone wrote in between)."""
        body = tree.encode(self.namespace, self.settings.tree, self.settings.name)
        status, reply = await self._request("PUT", self.tree_url, body, own=own, raw=raw)
        if status == 200:
            tree.version = str((reply.get("metadata") or {}).get("resourceVersion") or "")
            return tree
        if status == 409:
            return None
        raise failure(status, reply, "PUT", "configmaps", self.where)

    async def _update(
        self, change: Callable[[Tree], Tree | None], *, own: bool = False, raw: bool = False
    ) -> None:
        """Read the tree, ``change`` it (None: nothing to write), write it; again on 409."""
        for attempt in range(ATTEMPTS):
            tree = await self._read_tree(own=own, raw=raw)
            new = change(tree)
            if new is None or await self._write_tree(new, own=own, raw=raw) is not None:
                return
            await anyio.sleep(0.001 * secrets.randbelow(attempt + 1))
        raise ConnectionLost(f"the ha tree kept changing ({ATTEMPTS} tries)")

    async def _ensure_tree(self) -> None:
        method = "GET"
        status, body = await self._request(method, self.tree_url, own=True)
        if status == 404 and (body.get("details") or {}).get("kind") != "namespaces":
            empty = Tree().encode(self.namespace, self.settings.tree, self.settings.name)
            url = f"{CORE}/namespaces/{self.namespace}/configmaps"
            method = "POST"
            status, body = await self._request(method, url, empty, own=True)
            if status == 409:  # another driver made it first
                method = "GET"
                status, body = await self._request(method, self.tree_url, own=True)
        if status not in (200, 201):
            raise failure(status, body, method, "configmaps", self.where)
        self._known = Tree.decode(body, self.tree_url)

    async def _clear(self, sessions: set[int], *, raw: bool = False) -> None:
        """Strike ``sessions`` off the tree with their ephemeral nodes."""
        await self._update(lambda tree: _reaped(tree, sessions), own=True, raw=raw)

    # --- lifecycle --------------------------------------------------------------------------

    async def start(self) -> None:
        if self._task is not None or self._closing:
            raise RuntimeError("driver already started")
        self._api.open()
        self._started = True
        self._task = BackgroundTask(self._run, name=f"Kubernetes session in {self.where}")
        connect_timeout = self.settings.options.connect_timeout
        last: ConnectionLost | None = None
        try:
            with anyio.move_on_after(connect_timeout):
                while True:
                    try:
                        await self._ensure_tree()
                        await self._open()
                        break
                    except ConnectionLost as exc:
                        last = exc
                        await anyio.sleep(0.1)
            if self._session_id is None:
                raise Unavailable(
                    f"could not reach the Kubernetes API at {self.cluster.server} within"
                    f" {connect_timeout:g} s (connect_timeout)"
                    + (f"; last: {last}" if last else "")
                )
        except BaseException:
            self._task, self._started = None, False
            await self._api.aclose()
            raise
        self._task.start()
        self._emit(ConnectionEvent(ConnectionState.CONNECTED, self._session_id))

    async def aclose(self) -> None:
        task, self._task = self._task, None
        if task is None:
            return
        self._closing = True
        with anyio.CancelScope(shield=True):  # a close under cancellation still clears up
            await self._quiesce()  # (each override waits a second at most)
        await task.stop()
        session, self._session_id, self._connected = self._session_id, None, False
        if session is not None and not self._crashed:
            try:
                with anyio.CancelScope(shield=True):
                    await self._clear({session})
                    await self._drop_lease(session, self._lease_uid)
            except DriverError as exc:
                log.warning("could not clear the Kubernetes session %x: %s", session, exc)
        self._started = False
        await self._api.aclose()
        if session is not None and not self._crashed:
            self._emit(ConnectionEvent(ConnectionState.CLOSED, None))

    async def _run(self) -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._watch_loop)
            tg.start_soon(self._reap_loop)
            await self._renew_loop()

    async def _watch_loop(self) -> None:
        """Hook: the node events' loop (watches.py)."""

    async def _reap_loop(self) -> None:
        """Hook: the loop that expires other sessions (liveness.py)."""

    async def _quiesce(self) -> None:
        """Hook: the background tasks are about to be cancelled."""

    def _restart_watch(self) -> None:
        """Hook: contact is back (or a new session began): the watch should start afresh."""

    # --- the session ------------------------------------------------------------------------

    def _lease_body(self, session: int, acquired: str) -> dict[str, Any]:
        metadata: dict[str, Any] = {
            "name": self.settings.lease(session),
            "namespace": self.namespace,
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
        status, reply = await self._request("POST", self.leases_url, body, own=True)
        if status == 409:
            raise ConnectionLost("a session id was taken (try again)")
        if status != 201:
            raise failure(status, reply, "POST", "leases", self.where)
        self._lease_version = str(reply["metadata"]["resourceVersion"])
        self._lease_uid = str(reply["metadata"]["uid"])
        try:
            await self._update(lambda tree: _registered(tree, session), own=True)
        except BaseException:
            with anyio.CancelScope(shield=True), anyio.move_on_after(self.settings.op_timeout):
                try:
                    await self._drop_lease(session, self._lease_uid)
                except DriverError:
                    pass  # left for peers to reap
            raise
        self._session_id = session
        self._last_contact = sent
        self._connected = True

    async def _renew_loop(self) -> None:
        while True:
            wait = self._session_timeout / (3 if self._connected else 10)
            with anyio.move_on_after(wait):
                await self._wake.wait()
            self._wake = anyio.Event()
            if self._session_id is None:
                try:
                    await self._open()
                except DriverError as exc:
                    log.debug("could not open a Kubernetes session: %s", exc)
                    continue
                self._emit(ConnectionEvent(ConnectionState.CONNECTED, self._session_id))
                self._restart_watch()
            else:
                await self._renew()

    async def _renew(self) -> None:
        session = self._session_id
        assert session is not None
        sent = anyio.current_time()
        body = self._lease_body(session, self._acquired)
        within = self._session_timeout / 3
        url = self.lease_url(session)
        try:
            status, reply = await self._request("PUT", url, body, within=within, own=True)
            if status == 409:  # ours still, if a renewal that timed out landed after all
                status, reply = await self._request("GET", url, within=within, own=True)
                if status == 200 and self._ours(reply, session):
                    self._lease_version = str(reply["metadata"]["resourceVersion"])
                    self._wake.set()  # renew with it now; this one proves nothing
                    return
                status = 404  # reaped, or taken: this session is over
        except DriverError:
            self._lost_contact()
            return
        if session != self._session_id:
            return
        # (201: a server that ignored the uid created the Lease anew; the session is gone
        # all the same, and the new Lease, never registered, is left to the reapers)
        if status in (201, 404):
            await self._expired(session)
            return
        if status != 200:
            log.warning("%s", failure(status, reply, "PUT", "leases", self.where))
            self._lost_contact()
            return
        self._lease_version = str(reply["metadata"]["resourceVersion"])
        self._last_contact = max(self._last_contact, sent)
        if not self._connected:
            self._connected = True
            self._emit(ConnectionEvent(ConnectionState.RECONNECTED, session))
            self._restart_watch()

    def _ours(self, lease: dict[str, Any], session: int) -> bool:
        """Whether ``lease`` is the very Lease this session created, still held by it."""
        uid = (lease.get("metadata") or {}).get("uid")
        holder = (lease.get("spec") or {}).get("holderIdentity")
        return uid == self._lease_uid and holder == f"{session:016x}"

    async def _drop_lease(self, session: int, uid: str) -> None:
        """Delete the session's Lease if it is the one created with ``uid`` (another one of
        that name is not this session's to delete: the server answers 409)."""
        options = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid}}
        await self._request("DELETE", self.lease_url(session), options if uid else None, own=True)

    async def _expired(self, session: int) -> None:
        """The Lease was taken away: the session is over; clear what is left of it."""
        uid = self._lease_uid
        self._session_id, self._connected = None, False
        self._emit(ConnectionEvent(ConnectionState.EXPIRED, session))
        try:
            await self._clear({session})
            await self._drop_lease(session, uid)
        except DriverError as exc:  # peers clear it: a registered session without a Lease
            log.debug("could not clear the expired session %x: %s", session, exc)
        self._wake.set()  # a new session at once

    async def session_lease(self, owner: int) -> SessionLease | None:
        """Another session's Lease: its ``renewTime`` against this host's wall clock, with the
        ``leaseDurationSeconds`` it states; None if the Lease is gone.

        An estimate, for display only: ``renewTime`` is the holder's wall clock, so the
        reading is off by the clock offset between the two hosts (nothing here depends on it:
        peers expire a Lease by their own monotonic clocks, ``liveness``, no sooner than the
        duration after they see it renewed, so "expires in" errs early, not late).
        """
        status, body = await self._request("GET", self.lease_url(owner))
        if status == 404:
            return None
        if status != 200:
            raise failure(status, body, "GET", "leases", self.where)
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

    def _lost_contact(self) -> None:
        if self._connected:
            self._connected = False
            self._emit(ConnectionEvent(ConnectionState.DISCONNECTED, self._session_id))

    def _check_session(self) -> int:
        """The current session for an ephemeral create, or SessionExpired."""
        if self._session_id is None:
            raise SessionExpired("the Kubernetes driver has no session now (it is opening one)")
        return self._session_id


def _registered(tree: Tree, session: int) -> Tree:
    registered = Tree(dict(tree.nodes), tree.sessions | {session}, tree.txn, tree.seq)
    registered.version, registered.log = tree.version, tree.log  # no node written: no new txn
    return registered


def _reaped(tree: Tree, sessions: set[int]) -> Tree | None:
    new, _ = reap(tree, sessions)
    return None if new is tree else new
