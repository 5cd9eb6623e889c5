"""The etcd driver: ``etcd://h1:2379,h2:2379/prefix?session_timeout=5``, through etcd's gateway.

The node operations: a read is one etcd transaction of range requests (a node, its
incarnation record and its children's count, at one revision); a single create, set or delete
is one transaction too (``single``); other writes and every multi-op transaction go through
``mapping`` (read, decide, write if nothing moved). Write transactions of concurrent callers
share one etcd transaction (``writes``), as their reads do (``reads``). All on the session of
``session``, with the events of ``watches`` and the test hooks of ``faults``.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from typing import Any, Self

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
from ..base import (
    Capabilities,
    Check,
    Create,
    Delete,
    Op,
    SessionKind,
    SetData,
    Stat,
    parent_of,
    validate_path,
)
from . import subtree
from .faults import FaultHooks
from .keys import b64, pack_value, unb64
from .mapping import Node, Reads, Snapshot, compare, get, node_of, plan, put
from .settings import Settings, parse_url
from .single import Fallback, deletes, guarded, single
from .writes import WriteBatcher

__all__ = ("EtcdDriver",)

ATTEMPTS = 50  # reads and writes of one transaction, while other clients keep moving its keys
ENSURE_LEVELS = 100  # nodes made by one ensure_paths transaction (etcd allows 128 operations)


class EtcdDriver(FaultHooks):
    """A lease on an etcd cluster and the nodes under a key prefix. Build with ``from_url``."""

    capabilities = Capabilities(
        name="etcd",
        cross_process=True,
        cross_host=True,
        durable=True,
        push_watches=True,
        sessions=SessionKind.LEASE,
        session_leases=True,
    )

    def __init__(self, hosts: str = "127.0.0.1:2379", *, prefix: str = "", **options: Any):
        super().__init__(Settings.check(hosts, prefix, **options))
        self._writes = WriteBatcher(self._send_write, self.settings.op_timeout)

    @classmethod
    def from_url(cls, url: str, **options: Any) -> Self:
        """``etcd://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...][/PREFIX][?OPTION=VALUE&...]``.

        Options (also as keywords, which win over the URL): session_timeout, connect_timeout,
        op_timeout (seconds); user, password; TLS: tls (https), ca, cert, key.
        """
        netloc, prefix, values = parse_url(url, options)
        return cls(netloc, prefix=prefix, **values)

    # --- requests ---------------------------------------------------------------------------

    async def _run(self) -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._writes.run)
            await super()._run()

    async def _request(
        self,
        method: str,
        body: dict[str, Any],
        within: float | None = None,
        *,
        lease: bool = False,
    ) -> dict[str, Any]:
        """A node operation's write transaction (one with compares) goes with those of other
        tasks made at the same time (``writes``); any other request goes as it is."""
        if method == "kv/txn" and "compare" in body and within is None and not lease:
            return await self._writes.write(body)
        return await super()._request(method, body, within, lease=lease)

    def _batching(self, on: bool) -> None:
        super()._batching(on)
        if on:
            self._writes.open()
        else:
            self._writes.close()

    async def _send_write(self, body: dict[str, Any]) -> dict[str, Any]:
        return await super()._request("kv/txn", body)

    # --- reads ------------------------------------------------------------------------------

    async def _node(self, path: str) -> tuple[Node | None, int]:
        """The node at ``path`` (None: absent) and its number of children, at one revision."""
        validate_path(path)
        start, end = self.space.children(path)
        requests = [get(start, end, count_only=True)]
        if path != "/":
            requests += [get(self.space.node(path)), get(self.space.incarnation(path))]
        _, replies = await self._ranges(requests)
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
        _, replies = await self._ranges(requests)
        if path != "/" and not replies[1].get("kvs"):
            raise NoNode(path)
        keys = (
            self.space.name_of(unb64(kv.get("key")), start) for kv in replies[0].get("kvs") or []
        )
        return sorted(keys)

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
        if not (await self._operation("kv/txn", body)).get("succeeded"):
            for path in paths:
                await super().ensure_path(path)

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
            levels = await self._levels(path)
            node = levels.node
            if node is None:
                raise NoNode(path)
            if version != -1 and node.version != version:
                raise BadVersion(path, version, node.version)
            if levels.deepest - levels.depth > subtree.LEVELS:  # too deep for one transaction
                await self._operation("kv/txn", subtree.unguarded(self.space, levels))
                continue
            reply = await self._operation("kv/txn", subtree.guarded(self.space, levels))
            if reply.get("succeeded"):
                return
            await anyio.sleep(random.uniform(0, 0.002 * attempt))  # a node came or went: again
        raise ConnectionLost(f"etcd: the subtree at {path} kept changing ({ATTEMPTS} tries)")

    async def _levels(self, path: str) -> subtree.Levels:
        """The node at ``path`` and the levels of its subtree, at one revision."""
        depth = path.count("/") + 1
        depths = range(depth, depth + subtree.BATCH)
        revision, replies = await self._ranges(subtree.reads(self.space, path, depths))
        levels = subtree.Levels.first(path, revision, replies)
        while not levels.complete and levels.node is not None:
            depths = range(depths.stop, depths.stop + subtree.BATCH)
            requests = subtree.reads(self.space, path, depths)[2:]
            _, replies = await self._ranges(requests, revision)
            levels = levels.more(replies)
        return levels

    async def _one(self, op: Op) -> str | Stat | None:
        """One op: in one round trip if it can (``single``), else read, decide and write."""
        try:
            one = single(op, self.space, self._lease, time.time())
            return one.outcome(await self._operation("kv/txn", one.body))
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
                if (await self._operation("kv/txn", deletes(removed, self.space))).get("succeeded"):
                    return [None] * len(removed)
            except Fallback:
                pass
        elif len(checked) > 1 and isinstance(checked[0], Check):  # a fenced write, say
            try:
                one = guarded(checked, self.space, self._lease, time.time())
                return one.outcome(await self._operation("kv/txn", one.body))
            except Fallback:
                pass
        return await self._apply(checked) if checked else []

    async def _apply(self, ops: list[Op]) -> list[str | Stat | None]:
        """Read what ``ops`` depend on, decide, and write if nothing moved (see ``mapping``)."""
        reads = Reads.of(ops, self.space)
        for attempt in range(ATTEMPTS):
            lease = self._lease
            if not lease and any(isinstance(op, Create) and op.ephemeral for op in ops):
                raise SessionExpired("the etcd driver has no session now (it is opening one)")
            revision, replies = await self._ranges(reads.requests(self.space))
            snap = Snapshot.of(reads, self.space, revision, replies)
            outcome = plan(ops, snap, self.space, lease, time.time())
            if not outcome.writes:  # checks only: they held at that revision
                return outcome.results
            body = {"compare": outcome.compares, "success": outcome.writes}
            try:
                reply = await self._operation("kv/txn", body)
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
