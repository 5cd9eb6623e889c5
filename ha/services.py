"""HA services of one cluster: leader election for many components, leader retrieval, stores.

This is what Flink's ``HighAvailabilityServices`` give a job manager, shaped for anyio::

    async with ha.services("zk://127.0.0.1:2181/app", "cluster-1") as services:
        election = services.leader_election("dispatcher")
        await election.start(dispatcher)      # dispatcher.grant_leadership(session_id) ...
        ...
        async for info in services.leader_retrieval("dispatcher"):   # from any process
            print(info)                        # LeaderInfo(address, session_id) or None

Election (Flink 1.15+'s multi-component leader election). Every component of a process shares
one ``Elector`` at ``<prefix>/<cluster_id>/election``, so one failover moves all of them. When
the process wins, each registered component gets ``grant_leadership(session_id)`` with a fresh
UUID, in its own task inside the leadership scope; it later calls
``confirm_leadership(session_id, address)``. Only then is ``LeaderInfo(address, session_id)``
published at ``<prefix>/<cluster_id>/leader/<component>``, by a transaction that checks the
epoch (``lease.fence_ops()``) and the version of our election lock, and only while the driver
still has the session that won. A confirm with a session id other than the current grant's is
ignored; ``has_leadership(session_id)`` is true only for the current grant of a valid lease. On
loss, the leadership scope is cancelled and every granted component gets ``revoke_leadership()``
before the elector does anything else (it waits for the scope to finish).

The published node is ephemeral (it goes with the leader's session, so a crashed leader's
address does not linger) and is watched while leading: if anyone changes or deletes it, it is
written again (Flink's node-changed correction).

Retrieval: ``leader_retrieval(component)`` is an async iterator of the component's
``LeaderInfo``, or ``None`` when there is none (no node, or no contact with the backend: we
cannot know). It yields the current value first and then each change, never the same value
twice in a row. It needs no election: processes that never contend use it too.

Standalone (``none://``, Flink's ``StandaloneHaServices``): no coordination service. The
process is always the leader (a private in-memory backend holds its election and stores), and
``none://?dispatcher=host:8081&rest=host:8082`` fixes the address that retrieval reports for
the components named, as configured addresses do in Flink's standalone mode.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Protocol, Self
from urllib.parse import parse_qsl, urlsplit

import anyio
import anyio.abc

from .drivers import connect
from .drivers.base import (
    Check,
    ConnectionEvent,
    ConnectionState,
    Create,
    Delete,
    Driver,
    NodeEvent,
    Op,
    SetData,
    Subscription,
    post_order,
)
from .drivers.memory import MemoryCluster, MemoryDriver
from .election.elector import Elector
from .election.lease import Lease
from .election.timing import Timing
from .errors import (
    BadVersion,
    ConfigurationError,
    CorruptData,
    DriverError,
    Fenced,
    NodeExists,
    NoNode,
    TransactionFailed,
)
from .stores import BlobStore, Stores, codec
from .stores.fencing import Writer
from .stores.layout import Layout, check_name

__all__ = ("Component", "HAServices", "LeaderElection", "LeaderInfo", "LeaderRetrieval", "services")

log = logging.getLogger("ha.services")

LEADER = "ha.leader"
STANDALONE_SESSION = uuid.UUID(int=0)  # the session id of addresses fixed in a none:// URL


@dataclass(frozen=True, slots=True)
class LeaderInfo:
    """Where a component's leader is, and the session id it confirmed."""

    address: str
    session_id: uuid.UUID

    def encode(self) -> bytes:
        return codec.encode(LEADER, {"address": self.address, "session_id": str(self.session_id)})

    @classmethod
    def decode(cls, path: str, data: bytes) -> LeaderInfo:
        doc = codec.decode(path, data, LEADER)
        address = codec.field(path, doc, "address", str)
        raw = codec.field(path, doc, "session_id", str)
        try:
            return cls(address, uuid.UUID(raw))
        except ValueError:
            raise CorruptData(path, f"session_id is not a UUID: {raw!r}") from None


class Component(Protocol):
    """What a component supplies to take part in its process's leader election.

    ``grant_leadership`` runs in a task of the leadership scope: it may start the component's
    work and return, or do the work itself until cancelled. ``revoke_leadership`` is called
    when the grant ends (leadership lost, component closed); it should return promptly (it is
    bounded by the elector's hook timeout) and must not rely on the backend. An exception from
    ``grant_leadership`` is logged and ends nothing but that task: the grant stands, and no
    address is published for it unless it was confirmed.
    """

    async def grant_leadership(self, session_id: uuid.UUID) -> None: ...

    async def revoke_leadership(self) -> None: ...


def _default_identity() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class LeaderElection:
    """One component's part in its process's election (Flink's ``LeaderElection``)."""

    def __init__(self, services: HAServices, name: str) -> None:
        self.services = services
        self.name = name
        self.path = f"{services.layout.root}/leader/{name}"
        self.component: Component | None = None
        self._grant: uuid.UUID | None = None  # the current grant's session id
        self._granted = False  # grant_leadership was called in this term (revoke it on loss)
        self._confirmed: LeaderInfo | None = None  # for the current grant
        self._scope: anyio.CancelScope | None = None  # the grant_leadership task's
        self._done: anyio.Event | None = None
        self._watch: Subscription | None = None

    async def start(self, component: Component) -> None:
        """Register the component; it is granted leadership whenever this process leads."""
        if self.component is not None:
            raise ConfigurationError(f"component {self.name!r} is already started")
        for hook in ("grant_leadership", "revoke_leadership"):
            if not callable(getattr(component, hook, None)):
                raise ConfigurationError(f"component {self.name!r} has no {hook}() method")
        self.component = component
        await self.services._registered(self)

    def has_leadership(self, session_id: uuid.UUID) -> bool:
        """True while ``session_id`` is the current grant and the process still leads."""
        lease = self.services._lease
        return (
            self._grant is not None
            and session_id == self._grant
            and lease is not None
            and lease.valid
        )

    async def confirm_leadership(self, session_id: uuid.UUID, address: str) -> None:
        """Publish ``address`` as this component's leader, if ``session_id`` is still current.

        A stale session id (an older grant, or leadership already lost) is ignored. Returns
        once the address is written, or once the write failed for lack of contact: then it is
        written as soon as it can be, for as long as the grant lasts.
        """
        if not self.has_leadership(session_id):
            log.info("%s: ignoring a confirm with stale session id %s", self.name, session_id)
            return
        self._confirmed = LeaderInfo(address, session_id)
        try:
            await self.services._publish(self)
        except DriverError as exc:
            log.info("%s: address not published yet: %s", self.name, exc)
            self.services._retry_publication()

    async def close(self) -> None:
        """Leave the election: revoke the grant, remove the published address if ours."""
        if self.component is None:
            return
        await self.services._unregistered(self)
        self.component = None


class LeaderRetrieval:
    """``async for info in retrieval``: the component's ``LeaderInfo`` or None, on each change.

    ``aclose()`` (or leaving ``async with``) drops its subscriptions; an iterator left behind
    costs two subscriptions and a flag, no buffer.
    """

    def __init__(self, services: HAServices, name: str) -> None:
        self.services = services
        self.path = f"{services.layout.root}/leader/{name}"
        self._fixed = services._fixed.get(name)
        self._subs: list[Any] = []
        self._changed: anyio.Event | None = None
        self._started = False
        self._last: LeaderInfo | None = None

    def _poke(self, event: object) -> None:
        if self._changed is not None:
            self._changed.set()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> LeaderInfo | None:
        if not self._started:
            self._started = True
            self._changed = anyio.Event()
            if self._fixed is None:
                driver = self.services.driver
                self._subs = [
                    driver.subscribe(self.path, self._poke),
                    driver.subscribe(None, self._poke),
                ]
            info = await self._read()
            self._last = info
            return info
        assert self._changed is not None
        while True:
            await self._changed.wait()
            self._changed = anyio.Event()  # events from here on wake the next read
            info = await self._read()
            if info != self._last:
                self._last = info
                return info

    async def _read(self) -> LeaderInfo | None:
        if self._fixed is not None:
            return self._fixed
        driver = self.services.driver
        if not driver.connected:
            return None  # we cannot know who leads
        try:
            data, _ = await driver.get(self.path)
        except NoNode:
            return None
        except DriverError as exc:
            log.debug("%s: leader unknown for now: %s", self.path, exc)
            return None  # a connection event will wake us when contact is back
        if not data:
            return None
        return LeaderInfo.decode(self.path, data)

    async def aclose(self) -> None:
        for sub in self._subs:
            sub.close()
        self._subs = []

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class HAServices:
    """The HA services of one cluster; use ``async with``. Built by ``ha.services(...)``."""

    def __init__(
        self,
        driver: Driver,
        cluster_id: str,
        *,
        owns_driver: bool = False,
        identity: str | bytes | None = None,
        prefix: str = "/ha",
        timing: Timing | None = None,
        blobs: BlobStore | str | os.PathLike[str] | None = None,
        fixed: dict[str, LeaderInfo] | None = None,
    ) -> None:
        self.driver = driver
        self.layout = Layout(cluster_id, prefix)
        self.cluster_id = cluster_id
        self.identity = identity or _default_identity()
        self.timing = timing or Timing()
        self.blobs = blobs
        self.election_path = f"{self.layout.root}/election"
        self._owns_driver = owns_driver
        self._fixed = dict(fixed or {})
        self._elections: dict[str, LeaderElection] = {}
        self._tg: anyio.abc.TaskGroup | None = None
        self._elector: Elector | None = None
        self._elector_done: anyio.Event | None = None
        self._lease: Lease | None = None
        self._lock_version = 0
        self._writer: Writer | None = None
        self._lead_tg: anyio.abc.TaskGroup | None = None
        self._dirty: anyio.Event | None = None  # published info may need correcting
        self._subs: list[Any] = []

    # --- lifecycle ----------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        if self._owns_driver:
            await self.driver.start()
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        self._subs.append(self.driver.subscribe(None, self._on_connection))
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        try:
            with anyio.CancelScope(shield=True):
                await self.close()
        finally:
            tg, self._tg = self._tg, None
            assert tg is not None
            try:
                suppress = await tg.__aexit__(exc_type, exc, tb)
            finally:
                for sub in self._subs:
                    sub.close()
                self._subs = []
                if self._owns_driver:  # its task group was entered before ours: no scope between
                    await self.driver.aclose()
        return suppress

    async def close(self) -> None:
        """Leave the election (every component revoked, published addresses removed); the
        stores' data stays."""
        for election in list(self._elections.values()):
            await election.close()
        await self._stop_elector()

    async def close_and_cleanup_all_data(self) -> None:
        """Remove everything of the cluster: stores, blobs, published addresses, election.

        Must be called by the leader (the stores are removed under its fence) when the whole
        cluster is shut down; the election's own nodes go last, after leaving it, while this
        process holds the lock once more. The election's epoch counter (and its parents) is
        kept, so a cluster started again with the same id never reuses a fencing token.
        """
        lease = self._lease
        if lease is None or not lease.valid:
            raise Fenced("only the current leader may remove the cluster's data")
        if self.blobs is not None:
            await self.stores().close_and_cleanup_all_data()
        else:
            await Stores(
                self.driver,
                self.cluster_id,
                blobs=_NoBlobs(),
                lease=lease,
                prefix=self.layout.prefix,
            ).close_and_cleanup_all_data()
        await self.close()
        # Hold the election's lock while the nodes go, so no standby can claim in between
        # (it would lose its lock, and its epoch, to the wipe). The epoch counter stays:
        # fencing tokens never go back, and a deposed leader's stale lease cannot pass a
        # fence check against a counter recreated at its old version (ABA).
        lock = f"{self.election_path}/lock"
        epoch = f"{self.election_path}/epoch"
        ident = self.identity
        try:
            await self.driver.create(
                lock, ident.encode() if isinstance(ident, str) else ident, ephemeral=True
            )
        except NodeExists:
            log.warning("%s: another process leads now; its election is left", self.layout.root)
            return
        session = self.driver.session_id
        try:
            # every claim bumps the epoch, and the counter is never deleted: checking its
            # version stops the wipe if our session ended and someone claimed (a lock check
            # would not: a recreated lock has version 0 again)
            guard = Check(epoch, (await self.driver.get(epoch))[1].version)
            for path in await post_order(self.driver, self.layout.root):
                if path in (lock, epoch) or epoch.startswith(path + "/"):
                    continue
                try:
                    await self.driver.transaction([guard, Delete(path)])
                except TransactionFailed as exc:
                    if exc.index == 0:
                        log.warning("%s: someone claimed during the cleanup: stopped", lock)
                        return
                    log.info("%s: not removed: %s", path, exc)
                except DriverError as exc:
                    log.info("%s: not removed: %s", path, exc)
        finally:
            with anyio.CancelScope(shield=True):
                try:  # owner-checked: never a lock a newer session made
                    _, stat = await self.driver.get(lock)
                    if stat.ephemeral_owner == session:
                        await self.driver.delete(lock, stat.version)
                except (NoNode, DriverError) as exc:
                    log.info("%s: not removed: %s", lock, exc)

    # --- election -----------------------------------------------------------------------------

    def leader_election(self, component: str) -> LeaderElection:
        """The election handle of ``component`` (one per name and process)."""
        check_name("component", component)
        election = self._elections.get(component)
        if election is None:
            election = self._elections[component] = LeaderElection(self, component)
        return election

    def leader_retrieval(self, component: str) -> LeaderRetrieval:
        check_name("component", component)
        return LeaderRetrieval(self, component)

    @property
    def lease(self) -> Lease | None:
        """The lease of this process's current leadership, for fenced writes of its own."""
        lease = self._lease
        return lease if lease is not None and lease.valid else None

    def stores(self, **options: Any) -> Stores:
        """The stores of the cluster under the current lease (read-only when not leading)."""
        if self.blobs is None:
            raise ConfigurationError("no blob store: give ha.services(..., blobs=DIRECTORY)")
        options.setdefault("prefix", self.layout.prefix)
        return Stores(self.driver, self.cluster_id, blobs=self.blobs, lease=self.lease, **options)

    async def _registered(self, election: LeaderElection) -> None:
        election._watch = self.driver.subscribe(election.path, self._on_leader_node)
        if self._lead_tg is not None:  # leading already: grant at once
            self._grant(election, self._lead_tg)
        if self._elector is None:
            await self._start_elector()

    async def _unregistered(self, election: LeaderElection) -> None:
        lease = self._lease
        had = election._granted
        await self._stop_grant(election)  # first, so that nothing publishes it again
        if had and lease is not None and lease.valid:
            # remove our address while we may still write (Flink deletes it on close)
            try:
                await self._unpublish(election, lease)
            except (Fenced, DriverError) as exc:
                log.info("%s: published address not removed: %s", election.name, exc)
        await self._revoke(election)
        if election._watch is not None:
            election._watch.close()
            election._watch = None
        if not any(e.component is not None and e is not election for e in self._elections.values()):
            await self._stop_elector()  # no one left to lead for (Flink stops its driver too)

    async def _start_elector(self) -> None:
        if self._tg is None:
            raise RuntimeError("use the services as 'async with ha.services(...) as services'")
        elector = Elector(self.driver, self.election_path, self.identity, timing=self.timing)
        self._elector, self._elector_done = elector, anyio.Event()
        done = self._elector_done

        async def run(*, task_status: anyio.abc.TaskStatus[Elector]) -> None:
            try:
                await elector.run(_Leadership(self), task_status=task_status)
            finally:
                done.set()

        await self._tg.start(run)  # running before anyone may quit it

    async def _stop_elector(self) -> None:
        elector, done = self._elector, self._elector_done
        if elector is None or done is None:
            return
        elector.quit()
        await done.wait()
        self._elector = self._elector_done = None

    # --- leading ------------------------------------------------------------------------------

    async def _lead(self, lease: Lease) -> None:
        """The leadership scope of the process: grant, keep published, revoke on the way out."""
        _, stat = await self.driver.get(f"{self.election_path}/lock")
        if stat.ephemeral_owner != lease.session_id:
            raise Fenced("the election lock is not ours")  # the elector backs off and retries
        self._lease, self._lock_version = lease, stat.version
        self._writer = Writer(self.driver, lease)
        self._dirty = anyio.Event()
        try:
            async with anyio.create_task_group() as tg:
                self._lead_tg = tg
                for election in list(self._elections.values()):
                    if election.component is not None:
                        self._grant(election, tg)
                tg.start_soon(self._keep_published, lease)
                await anyio.sleep_forever()
        finally:
            self._lead_tg = None
            for election in self._elections.values():
                election._grant = None  # has_leadership is false from here on
                election._confirmed = None
            with anyio.CancelScope(shield=True):
                for election in list(self._elections.values()):
                    await self._revoke(election)
            self._lease = self._writer = None

    def _grant(self, election: LeaderElection, tg: anyio.abc.TaskGroup) -> None:
        component = election.component
        assert component is not None
        session_id = uuid.uuid4()
        election._grant, election._granted, election._confirmed = session_id, True, None
        scope, done = anyio.CancelScope(), anyio.Event()
        election._scope, election._done = scope, done

        async def grant() -> None:
            try:
                with scope:
                    await component.grant_leadership(session_id)
            except Exception:
                # the component's own failure: it keeps its grant (and no address is published
                # unless it confirmed); the other components and the election carry on
                log.exception("%s: grant_leadership raised", election.name)
            finally:
                done.set()

        tg.start_soon(grant)

    async def _stop_grant(self, election: LeaderElection) -> None:
        """End the grant: has_leadership false, nothing more published, its task stopped."""
        election._grant = None
        election._confirmed = None
        scope, done = election._scope, election._done
        election._scope = election._done = None
        if scope is not None and done is not None:
            scope.cancel()
            with anyio.move_on_after(self.timing.hook_timeout):
                await done.wait()

    async def _revoke(self, election: LeaderElection) -> None:
        """End the component's grant, then tell it."""
        await self._stop_grant(election)
        if not election._granted or election.component is None:
            return
        election._granted = False
        await _bounded(
            election.component.revoke_leadership, self.timing.hook_timeout, election.name
        )

    async def _publish(self, election: LeaderElection) -> None:
        """Write the confirmed info if the node does not hold it already."""
        lease, writer, info = self._lease, self._writer, election._confirmed
        if lease is None or writer is None or info is None:
            return
        lock = Check(f"{self.election_path}/lock", self._lock_version)
        data = info.encode()
        for attempt in range(6):
            if not lease.valid or self.driver.session_id != lease.session_id:
                return  # leadership is going; the new leader publishes its own
            if election._confirmed is not info:
                return  # the grant ended (or a newer confirm took over) while we looked
            if attempt == 0:
                # the common case after a failover: no node yet under an existing parent, so
                # write first and look only if that fails (saves two reads per grant)
                ops: list[Op] = [lock, Create(election.path, data, ephemeral=True)]
                try:
                    await writer.commit(ops)
                    log.info("%s: published %s", election.name, info.address)
                    return
                except Fenced:
                    return
                except TransactionFailed as exc:
                    if exc.index == 0:
                        log.info("%s: election lock lost; not publishing", election.name)
                        return
                    if not isinstance(exc.cause, NodeExists | NoNode):
                        raise exc.cause from exc
                    continue
            stat = await self.driver.exists(election.path)
            if stat is not None and stat.ephemeral_owner == lease.session_id:
                current, stat = await self.driver.get(election.path)
                if current == data:
                    return
                ops = [lock, SetData(election.path, data, stat.version)]
            elif stat is not None:  # someone else's node (an old leader's, or a stray write)
                ops = [lock, Delete(election.path, stat.version)]
                ops.append(Create(election.path, data, ephemeral=True))
            else:
                parents = await writer.parent_ops(election.path)
                ops = [lock, *parents, Create(election.path, data, ephemeral=True)]
            try:
                await writer.commit(ops)
                log.info("%s: published %s", election.name, info.address)
                return
            except Fenced:
                return  # deposed: the elector has been told, the component will be revoked
            except TransactionFailed as exc:
                if exc.index == 0:
                    log.info("%s: election lock lost; not publishing", election.name)
                    return
                if not isinstance(exc.cause, BadVersion | NodeExists | NoNode):
                    raise exc.cause from exc
                # the node changed between our look and our write: look again

    async def _unpublish(self, election: LeaderElection, lease: Lease) -> None:
        writer = self._writer
        stat = await self.driver.exists(election.path)
        if writer is None or stat is None or stat.ephemeral_owner != lease.session_id:
            return
        lock = Check(f"{self.election_path}/lock", self._lock_version)
        try:
            await writer.commit([lock, Delete(election.path, stat.version)])
        except TransactionFailed as exc:
            log.info("%s: address not removed: %s", election.name, exc)

    async def _keep_published(self, lease: Lease) -> None:
        """Node-changed correction: rewrite a confirmed address someone changed or deleted.

        Woken by events on the published nodes, by reconnections, and after failed writes.
        """
        delay = 0.05
        while True:
            assert self._dirty is not None
            await self._dirty.wait()
            self._dirty = anyio.Event()
            failed = False
            for election in list(self._elections.values()):
                if election._confirmed is None or not lease.valid:
                    continue
                try:
                    await self._publish(election)
                except DriverError as exc:
                    log.info("%s: correction postponed: %s", election.name, exc)
                    failed = True
            if failed:  # try again, more and more slowly, until it works or the term ends
                await anyio.sleep(delay)
                delay = min(delay * 2, self.driver.session_timeout)
                self._dirty.set()
            else:
                delay = 0.05

    def _retry_publication(self) -> None:
        if self._dirty is not None:
            self._dirty.set()

    def _on_leader_node(self, event: NodeEvent) -> None:
        if self._dirty is not None:
            self._dirty.set()

    def _on_connection(self, event: ConnectionEvent) -> None:
        if event.state in (ConnectionState.RECONNECTED, ConnectionState.CONNECTED):
            if self._dirty is not None:
                self._dirty.set()


class _Leadership:
    """The contender the services' one elector runs: all components lead together."""

    def __init__(self, services: HAServices) -> None:
        self.services = services

    async def become_active(self, lease: Lease) -> None:
        await self.services._lead(lease)


class _NoBlobs:
    """Stands in when no blob store was given: then no stored payload can be found either."""

    async def put(self, prefix: str, data: bytes) -> Any:
        raise ConfigurationError("no blob store configured")

    async def get(self, ref: Any) -> bytes:
        raise ConfigurationError("no blob store configured")

    async def delete(self, ref: Any) -> None:
        return None

    async def delete_all(self) -> None:
        return None


async def _bounded(hook: Callable[[], Awaitable[None]], limit: float, name: str) -> None:
    try:
        with anyio.fail_after(limit):
            await hook()
    except TimeoutError:
        log.error("%s: revoke_leadership did not finish in %gs", name, limit)
    except Exception:
        log.exception("%s: revoke_leadership raised", name)


def services(
    url_or_driver: str | Driver,
    cluster_id: str,
    *,
    identity: str | bytes | None = None,
    prefix: str = "/ha",
    timing: Timing | None = None,
    blobs: BlobStore | str | os.PathLike[str] | None = None,
    **driver_options: Any,
) -> HAServices:
    """The HA services of ``cluster_id`` on a backend URL or a started driver.

    A URL's driver is started and closed by the services (``async with``); a driver given is
    the caller's. ``none://[?component=address&...]`` is the standalone mode.
    """
    fixed: dict[str, LeaderInfo] = {}
    if isinstance(url_or_driver, str) and url_or_driver.startswith("none:"):
        parts = urlsplit(url_or_driver)
        if parts.netloc or parts.path.strip("/"):
            raise ConfigurationError(
                f"expected none:// or none://?component=address, got {url_or_driver!r}"
            )
        for name, address in parse_qsl(parts.query, keep_blank_values=True):
            fixed[check_name("component", name)] = LeaderInfo(address, STANDALONE_SESSION)
        driver: Driver = MemoryDriver(MemoryCluster(f"standalone-{cluster_id}"), **driver_options)
        owns = True
    elif isinstance(url_or_driver, str):
        driver, owns = connect(url_or_driver, **driver_options), True
    elif isinstance(url_or_driver, Driver):
        if driver_options:
            raise ConfigurationError("driver options go with a URL, not with a driver")
        driver, owns = url_or_driver, False
    else:
        raise ConfigurationError(f"expected a backend URL or a driver, got {url_or_driver!r}")
    return HAServices(
        driver,
        cluster_id,
        owns_driver=owns,
        identity=identity,
        prefix=prefix,
        timing=timing,
        blobs=blobs,
        fixed=fixed,
    )
