"""HA services of one cluster: leader election for many components, leader retrieval, stores.

This is what Flink's ``HighAvailabilityServices`` give a job manager, shaped for anyio::

    async with ha.open_services("zk://127.0.0.1:2181/app", "cluster-1") as services:
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
published at ``<prefix>/<cluster_id>/leader/<component>``, by a transaction behind the lease's
fence (``lease.fence_ops()``: our queue node in the election still lives), and only while the
driver still has the session that won. A confirm with a session id other than the current grant's is
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

Where things are: here ``HAServices`` (the one elector, the leadership scope), ``services()``;
``grant.py`` grant records; ``component.py`` ``Component``, ``LeaderElection``, ``ComponentError``;
``retrieval.py`` ``LeaderInfo``, ``LeaderRetrieval``; ``publication.py`` fenced writes of
confirmed addresses; ``cleanup.py`` the cluster's end; ``membership.py`` the member node that
``ha failover`` needs (``members=True``).
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import types
import uuid
import warnings
from collections.abc import Callable
from types import TracebackType
from typing import Any, Self
from urllib.parse import parse_qsl, urlsplit

import anyio
import anyio.abc

from ..drivers import connect
from ..drivers.base import ConnectionEvent, ConnectionState, Driver, NodeEvent, Subscription
from ..drivers.memory import MemoryCluster, MemoryDriver
from ..election.elector import Elector
from ..election.journal import JournalWriter
from ..election.lease import Lease
from ..election.timing import Timing
from ..errors import ConfigurationError, ContenderError, DriverError, Fenced
from ..stores import BlobStore, Stores
from ..stores.layout import Layout, check_name
from .cleanup import NoBlobs, remove_cluster_nodes, remove_election
from .component import Component, ComponentError, LeaderElection
from .grant import Grant, Leadership, revoke_bounded
from .membership import Membership
from .publication import Term
from .retrieval import STANDALONE_SESSION, LeaderInfo, LeaderRetrieval

__all__ = (
    "Component",
    "ComponentError",
    "HAServices",
    "LeaderElection",
    "LeaderInfo",
    "LeaderRetrieval",
    "services",
)

log = logging.getLogger("ha.services")

ElectorObserver = Callable[[Elector, object], object]  # see ``HAServices.on_elector``


def _default_identity() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class HAServices:
    """The HA services of one cluster; use ``async with``. Built by ``ha.open_services(...)``."""

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
        journal: JournalWriter | str | None = None,
        members: bool = False,
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
        self._grants: dict[str, Grant] = {}  # by component name
        self._watches: dict[str, Subscription] = {}  # on each registered component's node
        self._tg: anyio.abc.TaskGroup | None = None
        self._elector: Elector | None = None
        self._elector_done: anyio.Event | None = None
        self._term: Term | None = None  # while leading
        self._lead_tg: anyio.abc.TaskGroup | None = None
        self._subs: list[Subscription] = []
        self._keep_elector = False  # while the components close for the cleanup
        self._journal = journal
        self._next: Elector | None = None  # built ahead by ``elector``, run by the next start
        self._give_up: anyio.Event | None = None  # while leading: set to give the lead up
        self._membership = m = Membership(self) if members else None
        self._observers: list[ElectorObserver] = [] if m is None else [m.observe]

    # --- lifecycle ----------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        if self._owns_driver:
            await self.driver.start()
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        try:
            self._subs.append(self.driver.subscribe(None, self._on_connection))
            if self._membership is not None:  # claims our member node first
                await self._tg.start(self._membership.run)
        except BaseException:  # DuplicateIdentity, a lost driver, a cancellation
            await self._enter_failed()
            raise
        return self

    async def _enter_failed(self) -> None:
        """Undo a failed ``__aenter__``: its task group is left (it was entered in the caller's
        task: left open, the caller's next cancel scope would exit out of turn), the
        subscriptions closed and an owned driver closed, as ``__aexit__`` would."""
        tg, self._tg = self._tg, None
        try:
            if tg is not None:  # left as if nothing was raised (anyio would group the error)
                tg.cancel_scope.cancel()
                await tg.__aexit__(None, None, None)
        finally:
            for sub in self._subs:
                sub.close()
            self._subs = []
            if self._owns_driver:
                with anyio.CancelScope(shield=True):
                    await self.driver.aclose()

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
        if self._membership is not None:
            self._membership.scope.cancel()

    async def close_and_cleanup_all_data(self) -> None:
        """Remove everything of the cluster: stores, blobs, published addresses, election.

        Must be called by the leader when the whole cluster is shut down. The stores, then
        every other node of the cluster, are removed under its fence while it still leads
        (its components revoked first), then it leaves the election and the election's
        folders go if no other contender is queued (``cleanup.py``).
        """
        lease = self.lease
        if lease is None:
            raise Fenced("only the current leader may remove the cluster's data")
        if self.blobs is not None:
            await self.stores().close_and_cleanup_all_data()
        else:
            await Stores(
                self.driver,
                self.cluster_id,
                blobs=NoBlobs(),
                lease=lease,
                prefix=self.layout.prefix,
            ).close_and_cleanup_all_data()
        self._keep_elector = True  # the components go, the lead stays for the wipe
        try:
            for election in list(self._elections.values()):
                await election.close()
        finally:
            self._keep_elector = False
        await remove_cluster_nodes(self.driver, self.layout.root, self.election_path, lease)
        await self.close()
        await remove_election(self.driver, self.layout.root, self.election_path)

    # --- election -----------------------------------------------------------------------------

    def leader_election(self, component: str) -> LeaderElection:
        """The election handle of ``component`` (one per name and process)."""
        check_name("component", component)
        election = self._elections.get(component)
        if election is None:
            election = self._elections[component] = LeaderElection(self, component)
        return election

    @property
    def elector(self) -> Elector:
        """The process's elector: the one running, else the one the next start runs (built
        now, so that it can be watched or waited on before it runs)."""
        if self._elector is not None:
            return self._elector
        if self._next is None:
            d, path, journal = self.driver, self.election_path, self._journal
            self._next = Elector(d, path, self.identity, timing=self.timing, journal=journal)
        return self._next

    def on_elector(self, observer: ElectorObserver) -> None:
        """Call ``observer(elector, contender)`` with each elector the services run from now
        on, before it runs; it returns the contender to run (``ElectorMetrics(r).watch``)."""
        self._observers.append(observer)

    def give_up_leadership(self, reason: str) -> None:
        """Give the lead up as a failed ``become_active`` does (every component revoked, the
        lead released, joining again after the elector's backoff), for a component that
        cannot serve (a process-wide resource failed). Nothing happens when not leading."""
        if self._give_up is not None:
            log.warning("giving the lead up: %s", reason)
            self._give_up.set()

    def leader_retrieval(self, component: str) -> LeaderRetrieval:
        check_name("component", component)
        path = f"{self.layout.root}/leader/{component}"
        return LeaderRetrieval(self.driver, path, self._fixed.get(component))

    @property
    def lease(self) -> Lease | None:
        """The lease of this process's current leadership, for fenced writes of its own."""
        term = self._term
        return term.lease if term is not None and term.lease.valid else None

    def stores(self, **options: Any) -> Stores:
        """The stores of the cluster under the current lease (read-only when not leading)."""
        if self.blobs is None:
            raise ConfigurationError("no blob store: give ha.open_services(..., blobs=DIRECTORY)")
        options.setdefault("prefix", self.layout.prefix)
        return Stores(self.driver, self.cluster_id, blobs=self.blobs, lease=self.lease, **options)

    async def _registered(self, election: LeaderElection) -> None:
        self._watches[election.name] = self.driver.subscribe(election.path, self._on_leader_node)
        if self._lead_tg is not None:  # leading already: grant at once
            self._grant(election, self._lead_tg)
        out = self._membership is not None and self._membership.out
        if self._elector is None and not out:  # (out: the membership's rejoin starts it)
            await self._start_elector()

    async def _unregistered(self, election: LeaderElection) -> None:
        term, had = self._term, election.name in self._grants
        await self._stop_grant(election.name)  # first, so that nothing publishes it again
        if had and term is not None and term is self._term and term.lease.valid:
            # remove our address while we may still write (Flink deletes it on close)
            try:
                await term.unpublish(election.name, election.path)
            except (Fenced, DriverError) as exc:
                log.info("%s: published address not removed: %s", election.name, exc)
                election.report_error("remove the published address", exc)
        await self._revoke(election)
        watch = self._watches.pop(election.name, None)
        if watch is not None:
            watch.close()
        alone = not any(
            e.component is not None and e is not election for e in self._elections.values()
        )
        if alone and not self._keep_elector:
            await self._stop_elector()  # no one left to lead for (Flink stops its driver too)

    async def _start_elector(self) -> None:
        if self._tg is None:
            raise RuntimeError("use the services as 'async with ha.open_services(...) as services'")
        elector, self._next = self.elector, None  # (none runs: the next one)
        contender: object = Leadership(self)
        for observe in self._observers:
            contender = observe(elector, contender)
        self._elector, self._elector_done = elector, anyio.Event()
        done = self._elector_done

        async def run(*, task_status: anyio.abc.TaskStatus[Elector]) -> None:
            try:
                await elector.run(contender, task_status=task_status)
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
        term = self._term = Term(self.driver, lease)
        try:
            async with anyio.create_task_group() as tg:
                self._lead_tg = tg
                for election in list(self._elections.values()):
                    if election.component is not None:
                        self._grant(election, tg)
                tg.start_soon(self._keep_published, term)
                give_up = self._give_up = anyio.Event()
                await give_up.wait()
                tg.cancel_scope.cancel()
            # a component asked: the elector takes this as a failed become_active
            raise ContenderError("a component gave the lead up (give_up_leadership)")
        finally:
            self._give_up = None
            self._lead_tg = None
            for grant in self._grants.values():
                grant.ended, grant.confirmed = True, None  # has_leadership is false from here on
            with anyio.CancelScope(shield=True):
                for election in list(self._elections.values()):
                    await self._revoke(election)
            self._term = None

    def _has_leadership(self, name: str, session_id: uuid.UUID) -> bool:
        grant, lease = self._grants.get(name), self.lease
        return grant is not None and grant.current(session_id) and lease is not None

    def _grant(self, election: LeaderElection, tg: anyio.abc.TaskGroup) -> None:
        component = election.component
        assert component is not None
        session_id = uuid.uuid4()
        grant = self._grants[election.name] = Grant(session_id, anyio.CancelScope(), anyio.Event())

        async def run() -> None:
            try:
                with grant.scope:
                    await component.grant_leadership(session_id)
            except Exception as exc:
                # the component's own failure: it keeps its grant (and no address is published
                # unless it confirmed); the other components and the election carry on
                log.exception("%s: grant_leadership raised", election.name)
                election.report_error("grant_leadership", exc)
            finally:
                grant.done.set()

        tg.start_soon(run)

    async def _stop_grant(self, name: str) -> None:
        """End the grant: has_leadership false, nothing more published, its task stopped."""
        grant = self._grants.get(name)
        if grant is None or grant.ended:
            return
        grant.ended, grant.confirmed = True, None
        grant.scope.cancel()
        with anyio.move_on_after(self.timing.hook_timeout):
            await grant.done.wait()

    async def _revoke(self, election: LeaderElection) -> None:
        """End the component's grant, then tell it."""
        await self._stop_grant(election.name)
        grant = self._grants.pop(election.name, None)
        if grant is None or election.component is None:
            return
        await revoke_bounded(election, self.timing.hook_timeout)

    # --- publishing ---------------------------------------------------------------------------

    async def _confirmed(self, election: LeaderElection, info: LeaderInfo) -> None:
        """The current grant confirmed ``info``: publish it, now or as soon as we can."""
        self._grants[election.name].confirmed = info
        try:
            await self._publish(election)
        except DriverError as exc:
            log.info("%s: address not published yet: %s", election.name, exc)
            election.report_error("publish the address", exc)
            self._retry_publication()

    async def _publish(self, election: LeaderElection) -> None:
        """Write the confirmed info if the node does not hold it already."""
        term, grant = self._term, self._grants.get(election.name)
        info = grant.confirmed if grant is not None else None
        if term is None or info is None:
            return

        def current() -> bool:  # a newer confirm or the grant's end makes ``info`` stale
            grant = self._grants.get(election.name)
            return grant is not None and grant.confirmed is info

        await term.publish(election.name, election.path, info, current)

    async def _keep_published(self, term: Term) -> None:
        """Node-changed correction: rewrite a confirmed address someone changed or deleted.

        Woken by events on the published nodes, by reconnections, and after failed writes.
        """
        delay = 0.05
        while True:
            await term.dirty.wait()
            term.dirty = anyio.Event()
            failed = False
            for election in list(self._elections.values()):
                grant = self._grants.get(election.name)
                if grant is None or grant.confirmed is None or not term.lease.valid:
                    continue
                try:
                    await self._publish(election)
                except DriverError as exc:
                    log.info("%s: correction postponed: %s", election.name, exc)
                    election.report_error("correct the published address", exc)
                    failed = True
            if failed:  # try again, more and more slowly, until it works or the term ends
                await anyio.sleep(delay)
                delay = min(delay * 2, self.driver.session_timeout)
                term.dirty.set()
            else:
                delay = 0.05

    def _retry_publication(self) -> None:
        if self._term is not None:
            self._term.dirty.set()

    def _on_leader_node(self, event: NodeEvent) -> None:
        self._retry_publication()

    def _on_connection(self, event: ConnectionEvent) -> None:
        if event.state in (ConnectionState.RECONNECTED, ConnectionState.CONNECTED):
            self._retry_publication()


def services(
    url_or_driver: str | Driver,
    cluster_id: str,
    *,
    identity: str | bytes | None = None,
    prefix: str = "/ha",
    timing: Timing | None = None,
    blobs: BlobStore | str | os.PathLike[str] | None = None,
    journal: JournalWriter | str | None = None,
    members: bool = False,
    **driver_options: Any,
) -> HAServices:
    """The HA services of ``cluster_id`` on a backend URL or a started driver.

    A URL's driver is started and closed by the services (``async with``); a driver given is
    the caller's. ``none://[?component=address&...]`` is the standalone mode. ``journal``:
    the elector's transitions appended to this JSON-lines file; ``members``: a member node,
    so that ``ha failover`` can move this process (``membership.py``).
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
        journal=journal,
        members=members,
    )


class _CallableModule(types.ModuleType):
    """``ha.services`` was the function (shadowing this module); a call still works."""

    def __call__(self, *args: Any, **kwargs: Any) -> HAServices:
        warnings.warn(
            "ha.services(...) is deprecated: call ha.open_services(...)",
            DeprecationWarning,
            stacklevel=2,
        )
        return services(*args, **kwargs)


# here, not in ha/__init__.py: ``import ha.services`` alone (ha's names load lazily) gets it too
sys.modules[__name__].__class__ = _CallableModule
