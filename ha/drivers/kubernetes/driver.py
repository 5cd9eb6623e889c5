"""The Kubernetes driver: ``k8s://NAMESPACE/NAME?session_timeout=15``, on the API server.

Every node operation reads the tree's ConfigMap (one GET: a fresh, consistent state), and
every write puts the whole tree back with the resourceVersion it read: Kubernetes' one
compare-and-set (``tree``). A 409 means another driver wrote in between: the operation is
read and checked again, so only a real node-level mismatch raises ``BadVersion`` or
``TransactionFailed`` (Flink's ``checkAndUpdateConfigMap`` does the same). A write that gets
no answer raises ``ConnectionLost``: it may have landed (Flink's PossibleInconsistentState).

The driver is a facade over the parts it owns: the requests (``transport``, with the fault
gate), the tree's ConfigMap (``store``), the session (``session``: a Lease, renewed), the
peers' reaping (``liveness``), the node events (``watches``), the leaders shown to kubectl
(``leaders``) and the Events and pod role label of leader changes (``announce``). It starts
and closes them, in order.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Sequence
from typing import Any, Self

import anyio

from ..._background import BackgroundTask
from ...errors import ConfigurationError, ConnectionLost, DriverError, NoNode, TransactionFailed
from .._closing import waits_for_a_close
from .._faults import ClientFaults, FaultHooks
from .._input import checked_op, node_data
from .._parts import PartsDriver, SessionState
from ..base import (
    Capabilities,
    ConnectionEvent,
    ConnectionState,
    Create,
    Delete,
    Op,
    SessionKind,
    SessionLease,
    SetData,
    Stat,
    TreeSize,
    validate_path,
)
from . import tree as _tree
from .announce import LeaderNotices
from .config import load
from .leaders import LeaderLeases
from .liveness import Reaper
from .session import KubernetesSession
from .settings import Settings, parse_url
from .store import TreeStore
from .transport import Transport
from .tree import Plan, Tree, apply
from .watches import Watches

__all__ = ("KubernetesDriver",)

log = logging.getLogger("ha.drivers.kubernetes")

ATTEMPTS = 100  # tries of one transaction, while other drivers keep writing the tree


class KubernetesDriver(PartsDriver):
    """A session Lease and the nodes of one ``ha`` root in a namespace. Build with
    ``from_url`` (the cluster and credentials come from ``config``)."""

    capabilities = Capabilities(
        name="kubernetes",
        cross_process=True,
        cross_host=True,
        durable=True,
        push_watches=True,
        sessions=SessionKind.LEASE,
        session_leases=True,
    )

    def __init__(self, namespace: str | None = None, name: str = "ha", **options: Any) -> None:
        super().__init__()
        self.settings = settings = Settings.check(namespace, name, **options)
        self.cluster = load(settings.options.kubeconfig, settings.options.context)
        self.namespace = settings.namespace or self.cluster.namespace or "default"
        self._transport = Transport(settings, self.cluster, self.namespace, self._wake)
        self._store = TreeStore(self._transport)
        self._watches = Watches(self._transport, self._store, self._pass_on, self.watched_paths)
        self._session = KubernetesSession(
            self._transport, self._store, self._pass_on, self._watches.restart
        )
        self._reaper = Reaper(self._transport, self._store, self._session_now, self._period)
        self._leaders = LeaderLeases(self._transport, self._period)
        self._notices = LeaderNotices(self._transport, self._period)
        self._writing = anyio.Lock()
        self._task: BackgroundTask | None = None
        self._closing = False
        self._crashed = False  # a test's crash: the process is gone, nothing is said or undone

    @classmethod
    def from_url(cls, url: str, **options: Any) -> Self:
        """``k8s://NAMESPACE/NAME[?OPTION=VALUE&...]`` (``k8s:///NAME``: the configured
        namespace). Options (also as keywords, which win over the URL): session_timeout,
        connect_timeout, op_timeout (seconds); kubeconfig (a file), context (one of its
        contexts)."""
        namespace, name, values = parse_url(url, options)
        return cls(namespace, name, **values)

    # --- lifecycle --------------------------------------------------------------------------

    async def start(self) -> None:
        if self._task is not None or self._closing:
            raise RuntimeError("driver already started")
        self._transport.open()
        self._task = BackgroundTask(self._run, name=f"Kubernetes session in {self.where}")
        try:
            await self._session.open()
        except BaseException:
            self._task = None
            await self._transport.aclose()
            raise
        self._task.start()
        self._emit(ConnectionEvent(ConnectionState.CONNECTED, self._session.state.id))

    @waits_for_a_close
    async def aclose(self) -> None:
        task, self._task = self._task, None
        if task is None:
            return
        self._closing = True
        with anyio.CancelScope(shield=True):  # a close under cancellation still clears up
            await self._quiesce()  # (each part waits a second at most)
        await task.stop()
        session = await self._session.close(crashed=self._crashed)
        await self._transport.aclose()
        if session is not None and not self._crashed:
            self._emit(ConnectionEvent(ConnectionState.CLOSED, None))

    async def _run(self) -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._leaders.run)
            tg.start_soon(self._notices.run)
            tg.start_soon(self._watches.run)
            tg.start_soon(self._reaper.run)
            await self._session.state.run()

    async def _quiesce(self) -> None:
        """The background tasks are about to be cancelled: let their writes and streams end."""
        await self._notices.quiesce()  # first: a stop's last Event and label go out
        await self._leaders.quiesce()
        await self._watches.quiesce()

    def _wake(self) -> None:
        self._session.state.wake()

    def _session_now(self) -> int | None:
        return self._session.state.id

    def _period(self) -> float:
        return self._session.state.timeout

    # --- where things are, and the parts' figures (for tests) ---------------------------------

    @property
    def where(self) -> str:
        return self._transport.where

    @property
    def reaped(self) -> int:
        """Sessions this driver reaped."""
        return self._reaper.reaped

    @property
    def resyncs(self) -> int:
        """Full re-reads of the tree after a 410."""
        return self._watches.resyncs

    # --- the session, as the parts keep it --------------------------------------------------

    def _session_state(self) -> SessionState:
        return self._session.state

    async def session_lease(self, owner: int) -> SessionLease | None:
        return await self._session.lease_of(owner)

    def show_leader(self, path: str, identity: bytes, epoch: int) -> None:
        self._leaders.show_leader(path, identity, epoch)
        self._notices.show_leader(path, identity, epoch)

    def hide_leader(self, path: str, epoch: int) -> None:
        self._leaders.hide_leader(path, epoch)
        self._notices.hide_leader(path, epoch)

    # --- reads ------------------------------------------------------------------------------

    async def _tree(self) -> Tree:
        return await self._store.read()

    async def get(self, path: str) -> tuple[bytes, Stat]:
        validate_path(path)
        tree = await self._tree()
        entry, stat = tree.node(path), tree.stat(path)
        if entry is None or stat is None:
            raise NoNode(path)
        return entry.data, stat

    async def exists(self, path: str) -> Stat | None:
        validate_path(path)
        return (await self._tree()).stat(path)

    async def children(self, path: str) -> list[str]:
        validate_path(path)
        tree = await self._tree()
        if tree.node(path) is None:
            raise NoNode(path)
        return tree.children(path)

    async def tree_size(self) -> TreeSize:
        return self._size_of(await self._tree())

    def known_tree_size(self) -> TreeSize | None:
        # the tree as the watch last saw it (no version: not seen yet)
        known = self._store.known
        return self._size_of(known) if known.version else None

    def _size_of(self, tree: Tree) -> TreeSize:
        where = f"ConfigMap {self.namespace}/{self.settings.tree}"
        return TreeSize(tree.size(), _tree.LIMIT, len(tree.nodes), where)

    # --- writes -----------------------------------------------------------------------------

    async def create(
        self,
        path: str,
        data: bytes = b"",
        *,
        ephemeral: bool = False,
        sequential: bool = False,
        makepath: bool = False,
    ) -> str:
        op = checked_op(Create(path, node_data(data), ephemeral, sequential))
        assert isinstance(op, Create)

        def ops(tree: Tree) -> Sequence[Op]:
            if not makepath:
                return [op]
            parts = path.split("/")[1:-1]
            ancestors = ("/" + "/".join(parts[: depth + 1]) for depth in range(len(parts)))
            return [*(Create(a) for a in ancestors if tree.node(a) is None), op]

        results = await self._one(ops)
        created = results[-1]
        assert isinstance(created, str)
        return created

    async def set(self, path: str, data: bytes, version: int = -1) -> Stat:
        op = checked_op(SetData(path, node_data(data), version))
        (stat,) = await self._one(lambda tree: [op])
        assert isinstance(stat, Stat)
        return stat

    async def delete(self, path: str, version: int = -1, *, recursive: bool = False) -> None:
        validate_path(path)
        if path == "/":
            raise ConfigurationError("the root node cannot be deleted")

        def ops(tree: Tree) -> Sequence[Op]:
            if not recursive:
                return [Delete(path, version)]
            below = tree.subtree(path)  # children first, all read at one resourceVersion
            return [*(Delete(p) for p in below[:-1]), Delete(path, version)]

        await self._one(ops)

    async def _one(self, plan: Plan) -> list[str | Stat | None]:
        """A node operation: its transaction's failure raised as the failing op's error."""
        try:
            return await self._apply(plan)
        except TransactionFailed as exc:
            raise exc.cause from None

    async def transaction(self, ops: Sequence[Op]) -> list[str | Stat | None]:
        checked = [checked_op(op) for op in ops]
        return await self._apply(lambda tree: checked) if checked else []

    async def _apply(self, plan: Plan) -> list[str | Stat | None]:
        """Read the tree, decide the ops on it, write it with the version read; on 409,
        all over again. The ops are decided anew on each read (``plan``)."""
        async with self._writing:  # this driver's tasks take turns: they would only collide
            for attempt in range(ATTEMPTS):
                tree = await self._tree()
                ops = plan(tree)
                if any(isinstance(op, Create) and op.ephemeral for op in ops):
                    self._session.check()
                new, results = apply(tree, ops, self._session.state.id)
                if new.txn == tree.txn:  # checks only: they held at that version
                    return results
                if await self._store.write(new) is not None:
                    return results
                await anyio.sleep(0.001 * secrets.randbelow(attempt + 1))
        raise ConnectionLost(f"the ha tree kept changing ({ATTEMPTS} tries of one transaction)")

    # --- test faults (ha.testing.faults) ----------------------------------------------------

    def _faults(self) -> FaultHooks:
        return ClientFaults(
            self.capabilities.name,
            self._transport.gate,
            self._session.state,
            started=lambda: self._task is not None,
            restart_watch=self._watches.restart,
            stop=self._die,
            expire=self._end_session,
        )

    async def _die(self) -> None:
        """A test's crash: the background tasks stop; nothing is undone at close."""
        assert self._task is not None
        self._crashed = True
        await self._quiesce()
        await self._task.stop()

    async def _end_session(self) -> None:
        """The session's Lease is deleted and the session struck off the tree with its
        ephemeral nodes, now (what a peer's reaping does); the driver learns it from its next
        renewal (EXPIRED, then CONNECTED with a new session), which is sent at once."""
        session = self._session.state.id
        if session is None or self._task is None:
            raise RuntimeError("the Kubernetes driver has no session to expire")
        status, _ = await self._transport.raw("DELETE", self._transport.lease_url(session))
        if status not in (200, 202, 404):
            raise DriverError(f"could not delete the session's Lease ({status})")
        # from the server's side, whatever the client's faults
        await self._store.clear({session}, raw=True)
        self._session.state.wake()
