"""One node operation as one etcd transaction: a create, a set or a delete in a single round trip.

``mapping`` reads before it writes, which a transaction of several ops needs. A single op can
say its conditions to etcd directly, as compares on the state before it: create = the key
absent and its parent present without a lease; set and delete = the key's version (etcd's
version, less one, is ha's while the node has no incarnation record: that record's absence is
one more compare); delete = no key in the children's range. The failure branch reads what the
compares looked at, which names the error. A node that has an incarnation record, or a
failure the reads do not explain (the state moved in between), goes the long way (``Fallback``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ...errors import BadVersion, NodeExists, NoNode, NotEmpty, TransactionFailed
from ..base import Check, Create, Delete, Op, SetData, Stat, parent_of
from .keys import KeySpace, b64, kv_int, pack_value
from .mapping import compare, get, node_of, remove

__all__ = ("Fallback", "Guarded", "Single", "deletes", "guarded", "single")

DELETES = 32  # at most, in one transaction of deletes (3 compares each; etcd allows 128)


class Fallback(Exception):
    """This op must go through ``mapping`` (read, decide, write)."""


@dataclass(frozen=True, slots=True)
class Single:
    """One op's etcd transaction, and how to read its reply."""

    op: Op
    body: dict[str, Any]
    mtime: float
    space: KeySpace

    def outcome(self, reply: dict[str, Any]) -> str | Stat | None:
        """The op's result, its error raised, or ``Fallback``."""
        replies = [r.get("response_range") or r.get("response_put") or {} for r in _all(reply)]
        if reply.get("succeeded"):
            return self._result(replies)
        self._explain([_first(r) for r in replies])
        raise Fallback

    def _result(self, replies: list[dict[str, Any]]) -> str | Stat | None:
        op = self.op
        if isinstance(op, Create):
            return op.path
        if isinstance(op, Delete):
            return None
        before = replies[0].get("prev_kv") or {}
        version = kv_int(before, "version")  # the key's before the put: ha's after it
        lease = kv_int(before, "lease")
        count = int(replies[1].get("count") or 0)
        return Stat(version, lease or None, self.mtime, count, kv_int(before, "create_revision"))

    def _explain(self, found: list[dict[str, Any] | None]) -> None:
        """Raise the op's error from the failure branch's reads, if they explain it."""
        op = self.op
        if isinstance(op, Create):
            if found[0] is not None:
                raise NodeExists(op.path)
            parent = parent_of(op.path)
            if parent != "/" and len(found) > 1:
                if found[1] is None:
                    raise NoNode(parent)
                if kv_int(found[1], "lease"):
                    raise NoNode(f"{op.path} (ephemeral nodes cannot have children)")
            return
        kv, record = found[0], found[1]
        if kv is None:
            raise NoNode(op.path)
        node = node_of(op.path, kv, record)
        assert node is not None
        if op.version != -1 and node.version != op.version:
            raise BadVersion(op.path, op.version, node.version)
        if isinstance(op, Delete) and len(found) > 2 and found[2] is not None:
            raise NotEmpty(op.path)


def single(op: Op, space: KeySpace, lease: int, mtime: float, *, reads: bool = True) -> Single:
    """The transaction of one create (not sequential), set or delete; ``Fallback`` for other
    ops, and for an ephemeral create with no ``lease`` (the session's): the long way says why.
    Without ``reads`` its failure branch is left empty (nothing will read its reply)."""
    if isinstance(op, Create) and op.ephemeral and not lease:
        raise Fallback
    key = space.node(op.path) if op.path != "/" else b""
    record = space.incarnation(op.path)
    compares: list[dict[str, Any]] = []
    success: list[dict[str, Any]] = []
    failure: list[dict[str, Any]] = [get(key)] if reads else []
    if isinstance(op, Create) and not op.sequential and op.path != "/":
        compares.append(compare(key, "CREATE", "EQUAL", 0))
        parent = parent_of(op.path)
        if parent != "/":
            above = space.node(parent)
            compares.append(compare(above, "CREATE", "GREATER", 0))
            compares.append({"key": b64(above), "target": "LEASE", "result": "EQUAL", "lease": "0"})
            if reads:
                failure.append(get(above))
        value = {"key": b64(key), "value": b64(pack_value(op.data, mtime))}
        if op.ephemeral:
            value["lease"] = str(lease)
        success.append({"request_put": value})
    elif isinstance(op, SetData | Delete) and op.path != "/":
        if op.version == -1:
            compares.append(compare(key, "CREATE", "GREATER", 0))
        else:
            compares.append(compare(key, "VERSION", "EQUAL", op.version + 1))
        compares.append(compare(record, "CREATE", "EQUAL", 0))
        if reads:
            failure.append(get(record))
        start, end = space.children(op.path)
        if isinstance(op, SetData):
            value = {"key": b64(key), "value": b64(pack_value(op.data, mtime))}
            success.append({"request_put": {**value, "ignore_lease": True, "prev_kv": True}})
            success.append(get(start, end, count_only=True))
        else:
            compares.append(compare(start, "CREATE", "EQUAL", 0, end))
            success.append(remove(key))
            if reads:
                failure.append(get(start, end, limit=1, keys_only=True))
    else:
        raise Fallback
    body = {"compare": compares, "success": success, "failure": failure}
    return Single(op, body, mtime, space)


@dataclass(frozen=True, slots=True)
class Guarded:
    """Checks, then one op (``single``), as one etcd transaction, and how to read its reply."""

    checks: list[Check]
    one: Single
    body: dict[str, Any]

    def outcome(self, reply: dict[str, Any]) -> list[str | Stat | None]:
        """Each op's result, ``TransactionFailed`` naming the first that fails, or
        ``Fallback``. The failure branch reads each checked node and its record, then what
        ``single`` reads."""
        checks = len(self.checks)
        if reply.get("succeeded"):
            return [*([None] * checks), self.one.outcome(reply)]
        replies = _all(reply)
        found = [_first(r.get("response_range") or {}) for r in replies[: 2 * checks]]
        for index, check in enumerate(self.checks):
            kv, record = found[2 * index], found[2 * index + 1]
            node = node_of(check.path, kv, record)
            if node is None:
                raise TransactionFailed(index, NoNode(check.path))
            if check.version != -1 and node.version != check.version:
                raise TransactionFailed(index, BadVersion(check.path, check.version, node.version))
        try:
            self.one.outcome({"responses": replies[2 * checks :]})
        except (NodeExists, NoNode, BadVersion, NotEmpty) as exc:
            raise TransactionFailed(checks, exc) from None
        raise Fallback  # (not reached: a failed transaction's outcome raises)


def guarded(ops: Sequence[Op], space: KeySpace, lease: int, mtime: float) -> Guarded:
    """The transaction of checks followed by one op ``single`` makes (a fenced write: the
    leader's node checked, then the write), each check as compares: the node's key there, and
    at a version, its version as ``single`` says it. ``Fallback`` for other lists."""
    *first, last = ops
    checks = [op for op in first if isinstance(op, Check) and op.path != "/"]
    if not checks or len(checks) < len(first):
        raise Fallback
    one = single(last, space, lease, mtime)
    compares: list[dict[str, Any]] = []
    failure: list[dict[str, Any]] = []
    for check in checks:
        key, record = space.node(check.path), space.incarnation(check.path)
        if check.version == -1:
            compares.append(compare(key, "CREATE", "GREATER", 0))
        else:
            compares.append(compare(key, "VERSION", "EQUAL", check.version + 1))
            compares.append(compare(record, "CREATE", "EQUAL", 0))
        failure += [get(key), get(record)]
    body = {
        "compare": [*compares, *one.body["compare"]],
        "success": one.body["success"],
        "failure": [*failure, *one.body["failure"]],
    }
    return Guarded(checks, one, body)


def deletes(ops: list[Delete], space: KeySpace) -> dict[str, Any]:
    """The transaction of several deletes (a graceful exit's breadcrumb and node), in one round
    trip: each one's conditions as compares, as ``single`` says them. Its failure explains
    nothing: the long way then reads, decides and names the failing op. ``Fallback`` for
    deletes this cannot say (the root, a path twice, too many)."""
    paths = [op.path for op in ops]
    if len(ops) > DELETES or "/" in paths or len(set(paths)) < len(paths):
        raise Fallback
    compares: list[dict[str, Any]] = []
    success: list[dict[str, Any]] = []
    for op in ops:
        one = single(op, space, 0, 0.0, reads=False).body  # its failure explains nothing
        compares += one["compare"]
        success += one["success"]
    return {"compare": compares, "success": success}


def _all(reply: dict[str, Any]) -> list[dict[str, Any]]:
    return list(reply.get("responses") or [])


def _first(reply: dict[str, Any]) -> dict[str, Any] | None:
    kvs = reply.get("kvs") or []
    return kvs[0] if kvs else None
