"""The etcd driver's node operations, over its transport and in its session.

A read is one etcd transaction of range requests (a node, its incarnation record and its
children's count, at one revision); a single create, set or delete is one transaction too
(``single``); other writes and every multi-op transaction go through ``mapping`` (read,
decide, write if nothing moved). Write transactions of concurrent callers share one etcd
transaction, as their reads do (``transport``).
"""

from __future__ import annotations

import random
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import anyio

from ...errors import (
    BadVersion,
    ConfigurationError,
    ConnectionLost,
    DriverError,
    NodeExists,
    NoNode,
    SessionExpired,
    TransactionFailed,
)
from .._input import checked_op, node_data
from ..base import Check, Create, Delete, Op, SetData, Stat, parent_of, validate_path
from . import subtree
from .keys import KeySpace, b64, pack_value, unb64
from .mapping import Node, Reads, Snapshot, compare, get, node_of, plan, put
from .session import EtcdSession
from .single import Fallback, deletes, guarded, single
from .transport import Transport

__all__ = ("Operations",)

ATTEMPTS = 50  # reads and writes of one transaction, while other clients keep moving its keys
ENSURE_LEVELS = 100  # nodes made by one ensure_paths transaction (etcd allows 128 operations)


class Operations:
    """The node operations of ``ha.drivers.base.Driver`` on etcd keys (``KeySpace``)."""

    def __init__(
        self,
        space: KeySpace,
        transport: Transport,
        session: EtcdSession,
        long_way: Callable[[str], Awaitable[None]],
    ) -> None:
        self.space = space
        self._transport = transport
        self._session = session
        self._long_way = long_way  # ensure_path one create at a time (the driver's own)

    # --- reads ------------------------------------------------------------------------------

    async def _node(self, path: str) -> tuple[Node | None, int]:
        """The node at ``path`` (None: absent) and its number of children, at one revision."""
        validate_path(path)
        start, end = self.space.children(path)
        requests = [get(start, end, count_only=True)]
        if path != "/":
            requests += [get(self.space.node(path)), get(self.space.incarnation(path))]
        _, replies = await self._transport.ranges(requests)
        count = int(replies[0].get("count") or 0)
        if path == "/":
            return Node(b"", 0, 0, 0, 0.0, 0), count
        kv, record = ((r.get("kvs") or [None])[0] for r in replies[1:])
        return node_of(path, kv, record), count

    async def get(self, path: str) -> tuple[bytes, Stat]:
        node, count = await self._node(path)
        if node is None:
            raise NoNode(path)
        return node.data, node.stat(count)

    async def exists(self, path: str) -> Stat | None:
        node, count = await self._node(path)
        return None if node is None else node.stat(count)

    async def children(self, path: str) -> list[str]:
        validate_path(path)
        start, end = self.space.children(path)
        requests = [get(start, end, keys_only=True)]
        if path != "/":
            requests.append(get(self.space.node(path), keys_only=True))
        _, replies = await self._transport.ranges(requests)
        if path != "/" and not replies[1].get("kvs"):
            raise NoNode(path)
        keys = (
            self.space.name_of(unb64(kv.get("key")), start) for kv in replies[0].get("kvs") or []
        )
        return sorted(keys)

    # --- writes -----------------------------------------------------------------------------

    async def create(self, op: Create, makepath: bool) -> str:
        """``op`` (checked), with its missing parents if ``makepath``: the path created."""
        path = op.path
        try:
            created = await self._one(op)
        except NoNode as exc:
            if not makepath or exc.path != parent_of(path):
                raise
            await self._make_parents(path)
            created = await self._one(op)
        assert isinstance(created, str)
        return created

    async def _make_parents(self, path: str) -> None:
        parts = path.split("/")[1:-1]
        for depth in range(1, len(parts) + 1):
            try:
                await self._one(Create("/" + "/".join(parts[:depth])))
            except NodeExists:
                pass

    async def ensure_path(self, path: str) -> None:
        await self.ensure_paths([path])

    async def ensure_paths(self, paths: Sequence[str]) -> None:
        """Every missing node of ``paths`` created in one round trip: a nested transaction per
        level creates its node if absent (each compare sees the store before the whole
        transaction, so each level stands alone), under compares that no node on the way is
        ephemeral (an absent key has no lease either); if one is, the long way says so."""
        levels: dict[str, None] = {}  # every node of every path, once, parents first
        above: dict[str, None] = {}  # those with a node below them
        for path in paths:
            validate_path(path)
            parts = path.split("/")[1:] if path != "/" else []
            chain = ["/" + "/".join(parts[:depth]) for depth in range(1, len(parts) + 1)]
            levels.update(dict.fromkeys(chain))
            above.update(dict.fromkeys(chain[:-1]))
        if not levels:
            return
        if len(levels) > ENSURE_LEVELS and len(paths) > 1:  # over etcd's limit: path by path
            for path in paths:
                await self.ensure_paths([path])
            return
        value = pack_value(b"", time.time())
        body = {
            "compare": [_no_lease(self.space.node(level)) for level in above],
            "success": [
                {
                    "request_txn": {
                        "compare": [compare(self.space.node(level), "CREATE", "EQUAL", 0)],
                        "success": [put(self.space.node(level), value)],
                    }
                }
                for level in levels
            ],
        }
        if not (await self._transport.operation("kv/txn", body)).get("succeeded"):
            for path in paths:
                await self._long_way(path)

    async def set(self, path: str, data: bytes, version: int = -1) -> Stat:
        stat = await self._one(checked_op(SetData(path, node_data(data), version)))
        assert isinstance(stat, Stat)
        return stat

    async def delete(self, path: str, version: int = -1, *, recursive: bool = False) -> None:
        validate_path(path)
        if path == "/":
            raise ConfigurationError("the root node cannot be deleted")
        if not recursive:
            await self._one(Delete(path, version))
            return
        for attempt in range(ATTEMPTS):
            levels = await self.levels(path)
            node = levels.node
            if node is None:
                raise NoNode(path)
            if version != -1 and node.version != version:
                raise BadVersion(path, version, node.version)
            if levels.deepest - levels.depth > subtree.LEVELS:  # too deep for one transaction
                await self._transport.operation("kv/txn", subtree.unguarded(self.space, levels))
                continue
            reply = await self._transport.operation("kv/txn", subtree.guarded(self.space, levels))
            if reply.get("succeeded"):
                return
            await anyio.sleep(random.uniform(0, 0.002 * attempt))  # a node came or went: again
        raise ConnectionLost(f"etcd: the subtree at {path} kept changing ({ATTEMPTS} tries)")

    async def levels(self, path: str) -> subtree.Levels:
        """The node at ``path`` and the levels of its subtree, at one revision."""
        depth = path.count("/") + 1
        depths = range(depth, depth + subtree.BATCH)
        revision, replies = await self._transport.ranges(subtree.reads(self.space, path, depths))
        levels = subtree.Levels.first(path, revision, replies)
        while not levels.complete and levels.node is not None:
            depths = range(depths.stop, depths.stop + subtree.BATCH)
            requests = subtree.reads(self.space, path, depths)[2:]
            _, replies = await self._transport.ranges(requests, revision)
            levels = levels.more(replies)
        return levels

    async def _one(self, op: Op) -> str | Stat | None:
        """One op: in one round trip if it can (``single``), else read, decide and write."""
        try:
            one = single(op, self.space, self._session.lease, time.time())
            return one.outcome(await self._transport.operation("kv/txn", one.body))
        except Fallback:
            pass
        try:
            return (await self._apply([op]))[0]
        except TransactionFailed as exc:
            raise exc.cause from None

    async def transaction(self, ops: Sequence[Op]) -> list[str | Stat | None]:
        checked = [checked_op(op) for op in ops]
        removed = [op for op in checked if isinstance(op, Delete)]
        if len(removed) > 1 and len(removed) == len(checked):  # one round trip if all hold
            try:
                if (await self._transport.operation("kv/txn", deletes(removed, self.space))).get(
                    "succeeded"
                ):
                    return [None] * len(removed)
            except Fallback:
                pass
        elif len(checked) > 1 and isinstance(checked[0], Check):  # a fenced write, say
            try:
                one = guarded(checked, self.space, self._session.lease, time.time())
                return one.outcome(await self._transport.operation("kv/txn", one.body))
            except Fallback:
                pass
        return await self._apply(checked) if checked else []

    async def _apply(self, ops: list[Op]) -> list[str | Stat | None]:
        """Read what ``ops`` depend on, decide, and write if nothing moved (see ``mapping``)."""
        reads = Reads.of(ops, self.space)
        for attempt in range(ATTEMPTS):
            lease = self._session.lease
            if not lease and any(isinstance(op, Create) and op.ephemeral for op in ops):
                raise SessionExpired("the etcd driver has no session now (it is opening one)")
            revision, replies = await self._transport.ranges(reads.requests(self.space))
            snap = Snapshot.of(reads, self.space, revision, replies)
            outcome = plan(ops, snap, self.space, lease, time.time())
            if not outcome.writes:  # checks only: they held at that revision
                return outcome.results
            body = {"compare": outcome.compares, "success": outcome.writes}
            try:
                reply = await self._transport.operation("kv/txn", body)
            except DriverError as exc:
                if "too many operations" not in str(exc):
                    raise
                raise DriverError(
                    f"etcd: a transaction of {len(ops)} ops takes {len(outcome.compares)} "
                    f"compares and {len(outcome.writes)} writes, over the server's limit on "
                    "one transaction (--max-txn-ops, 128 by default): split it"
                ) from None
            if reply.get("succeeded"):
                done = int((reply.get("header") or {}).get("revision") or 0)
                return [_created_at(result, done) for result in outcome.results]
            for key in outcome.assumed:  # a sequential name is taken: read it next time
                reads.key(key)
            await anyio.sleep(random.uniform(0, 0.002 * attempt))
        raise ConnectionLost(f"etcd: the nodes of a transaction kept changing ({ATTEMPTS} tries)")


def _no_lease(key: bytes) -> dict[str, Any]:
    return {"key": b64(key), "target": "LEASE", "result": "EQUAL", "lease": "0"}


def _created_at(result: str | Stat | None, revision: int) -> str | Stat | None:
    """A Stat of a node created by the transaction, with its number (known only now)."""
    if isinstance(result, Stat) and result.created == 0:
        return Stat(
            result.version, result.ephemeral_owner, result.mtime, result.num_children, revision
        )
    return result
