"""The Kubernetes driver: ``k8s://NAMESPACE/NAME?session_timeout=15``, on the API server.

Every node operation reads the tree's ConfigMap (one GET: a fresh, consistent state), and
every write puts the whole tree back with the resourceVersion it read: Kubernetes' one
compare-and-set (``tree``). A 409 means another driver wrote in between: the operation is
read and checked again, so only a real node-level mismatch raises ``BadVersion`` or
``TransactionFailed`` (Flink's ``checkAndUpdateConfigMap`` does the same). A write that gets
no answer raises ``ConnectionLost``: it may have landed (Flink's PossibleInconsistentState).
All on the session of ``session``, with the peers' reaping of ``liveness``, the events of
``watches``, the test hooks of ``faults``, the leaders shown to kubectl of ``leaders`` and the
Events and pod role label of ``announce``.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import Any, Self

import anyio

from ...errors import ConfigurationError, ConnectionLost, NoNode, TransactionFailed
from .._input import checked_op, node_data
from ..base import (
    Capabilities,
    Create,
    Delete,
    Op,
    SessionKind,
    SetData,
    Stat,
    TreeSize,
    validate_path,
)
from . import tree as _tree
from .announce import LeaderNotices
from .settings import Settings, parse_url
from .tree import Plan, Tree, apply

__all__ = ("KubernetesDriver",)

ATTEMPTS = 100  # tries of one transaction, while other drivers keep writing the tree


class KubernetesDriver(LeaderNotices):
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
        super().__init__(Settings.check(namespace, name, **options))
        self._writing = anyio.Lock()

    @classmethod
    def from_url(cls, url: str, **options: Any) -> Self:
        """``k8s://NAMESPACE/NAME[?OPTION=VALUE&...]`` (``k8s:///NAME``: the configured
        namespace). Options (also as keywords, which win over the URL): session_timeout,
        connect_timeout, op_timeout (seconds); kubeconfig (a file), context (one of its
        contexts)."""
        namespace, name, values = parse_url(url, options)
        return cls(namespace, name, **values)

    # --- reads ------------------------------------------------------------------------------

    async def _tree(self) -> Tree:
        return await self._read_tree()

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
        return self._size_of(self._known) if self._known.version else None

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
                    self._check_session()
                new, results = apply(tree, ops, self._session_id)
                if new.txn == tree.txn:  # checks only: they held at that version
                    return results
                if await self._write_tree(new) is not None:
                    return results
                await anyio.sleep(0.001 * secrets.randbelow(attempt + 1))
        raise ConnectionLost(f"the ha tree kept changing ({ATTEMPTS} tries of one transaction)")
