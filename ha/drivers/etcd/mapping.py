"""ha's transactions as etcd transactions: read, decide, then write only if nothing changed.

etcd has two rules a list of ha's ops breaks as soon as it touches one node twice: a key may be
written at most once per transaction ("duplicate key given in txn request"), and every compare
sees the state from before the transaction (create ``/a`` then create ``/a/b``: ``/a``'s
existence cannot be an etcd compare). So a transaction goes in two steps:

1. one read (``Reads``) of every key the ops depend on, at one revision: the nodes, their
   incarnation records, their parents, the children of the nodes they delete or write, the
   counters of sequential creates;
2. ``plan`` runs the ops on that snapshot exactly as ``ha.drivers.base`` says (each op sees the
   earlier ones), naming the first failing op; if none fails, it writes each key's final state
   once, guarded by compares that pin every key it read (``MOD == its mod_revision``, or
   ``CREATE == 0`` for an absent one, and no child created since under a deleted node). If
   anything moved in between, etcd refuses the writes and the driver starts again.

A failure is thus reported from a state the backend really had during the call, and a success
applies every op at one revision, where all the nodes it creates share their create_revision.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ...errors import (
    ConfigurationError,
    DriverError,
    TransactionFailed,
)
from .._nodes import NODE_ERRORS, check_create, check_empty, check_version
from ..base import Check, Create, Delete, Op, SetData, Stat, parent_of
from .keys import Incarnation, KeySpace, b64, kv_int, pack_value, unb64, unpack_value

__all__ = ("Node", "Plan", "Reads", "Snapshot", "node_of", "plan")


@dataclass(frozen=True, slots=True)
class Node:
    """A node as stored: its data, and what its Stat says."""

    data: bytes
    version: int  # ha's version: 0 at creation, +1 per write
    created: int  # the revision of the transaction that created it
    lease: int  # 0: persistent
    mtime: float
    etcd_version: int  # the key's own version (etcd counts puts, not writes)

    def stat(self, num_children: int) -> Stat:
        return Stat(self.version, self.lease or None, self.mtime, num_children, self.created)


def node_of(path: str, kv: dict[str, Any] | None, record: dict[str, Any] | None) -> Node | None:
    """The node stored in the key-value ``kv`` (None: absent) and its incarnation ``record``."""
    if kv is None:
        return None
    data, mtime = unpack_value(path, unb64(kv.get("value")))
    etcd_version, created = kv_int(kv, "version"), kv_int(kv, "create_revision")
    version = etcd_version - 1
    # a record older than the key is left from an earlier node of that path: not this one's
    if record is not None and kv_int(record, "mod_revision") >= created:
        incarnation = Incarnation.decode(path, unb64(record.get("value")))
        version = etcd_version - incarnation.base
        created = incarnation.created or kv_int(record, "mod_revision")
    return Node(data, version, created, kv_int(kv, "lease"), mtime, etcd_version)


# --- etcd's request and compare shapes ----------------------------------------------------------


def get(key: bytes, end: bytes | None = None, **flags: Any) -> dict[str, Any]:
    request: dict[str, Any] = {"key": b64(key), **flags}
    if end is not None:
        request["range_end"] = b64(end)
    return {"request_range": request}


def put(key: bytes, value: bytes, lease: int = 0) -> dict[str, Any]:
    request: dict[str, Any] = {"key": b64(key), "value": b64(value)}
    if lease:
        request["lease"] = str(lease)
    return {"request_put": request}


def remove(key: bytes, end: bytes | None = None) -> dict[str, Any]:
    request = {"key": b64(key)}
    if end is not None:
        request["range_end"] = b64(end)
    return {"request_delete_range": request}


def compare(key: bytes, target: str, result: str, value: int, end: bytes | None = None) -> Any:
    field_name = {"CREATE": "create_revision", "MOD": "mod_revision", "VERSION": "version"}
    rule: dict[str, Any] = {
        "key": b64(key),
        "target": target,
        "result": result,
        field_name[target]: str(value),
    }
    if end is not None:
        rule["range_end"] = b64(end)
    return rule


# --- step 1: what to read ------------------------------------------------------------------------


@dataclass(slots=True)
class Reads:
    """The keys and child ranges a list of ops depends on, in the order they are read."""

    keys: list[bytes] = field(default_factory=list)
    listed: list[str] = field(default_factory=list)  # paths whose children are read

    @classmethod
    def of(cls, ops: Sequence[Op], space: KeySpace) -> Reads:
        reads = cls()
        for op in ops:
            sequential = isinstance(op, Create) and op.sequential
            if op.path != "/" and not sequential:  # a sequential name is known once planned
                reads.node(op.path, space)
            if isinstance(op, Create):
                parent = parent_of(op.path)
                if parent != "/":
                    reads.node(parent, space)
                if sequential:
                    reads.key(space.counter(parent))
            elif isinstance(op, Delete | SetData) and op.path not in reads.listed:
                reads.listed.append(op.path)
        return reads

    def node(self, path: str, space: KeySpace) -> None:
        self.key(space.node(path))
        self.key(space.incarnation(path))

    def key(self, key: bytes) -> None:
        if key not in self.keys:
            self.keys.append(key)

    def requests(self, space: KeySpace) -> list[dict[str, Any]]:
        ranges = [get(key) for key in self.keys]
        ranges += [get(*space.children(path), keys_only=True) for path in self.listed]
        return ranges


@dataclass(slots=True)
class Snapshot:
    """What ``Reads`` found, at ``revision``."""

    revision: int
    kvs: dict[bytes, dict[str, Any] | None]
    children: dict[str, set[str]]

    @classmethod
    def of(
        cls, reads: Reads, space: KeySpace, revision: int, replies: Sequence[dict[str, Any]]
    ) -> Snapshot:
        kvs: dict[bytes, dict[str, Any] | None] = {}
        for key, reply in zip(reads.keys, replies[: len(reads.keys)], strict=True):
            found = reply.get("kvs") or []
            kvs[key] = found[0] if found else None
        children: dict[str, set[str]] = {}
        listed = replies[len(reads.keys) : len(reads.keys) + len(reads.listed)]
        for path, reply in zip(reads.listed, listed, strict=True):
            start = space.children(path)[0]
            children[path] = {space.name_of(unb64(kv["key"]), start) for kv in reply.get("kvs", [])}
        return cls(revision, kvs, children)


# --- step 2: run the ops on the snapshot, then write the outcome --------------------------------


@dataclass(slots=True)
class _Path:
    """One node's course through the transaction."""

    before: Node | None
    now: Node | None
    reborn: bool = False  # created in the transaction (the key may have existed before)
    sets: int = 0  # writes since it was (re)created, or since the transaction began
    written: bool = False  # created, set or deleted: its keys are written


@dataclass(slots=True)
class Plan:
    """The checked outcome of a list of ops: compares and writes for one etcd transaction."""

    compares: list[dict[str, Any]]
    writes: list[dict[str, Any]]
    results: list[str | Stat | None]
    assumed: list[bytes]  # keys taken for absent without a read: read them if etcd refuses


class _Run:
    """The ops applied, one after the other, to a snapshot."""

    def __init__(self, snap: Snapshot, space: KeySpace, lease: int, mtime: float) -> None:
        self.snap, self.space, self.lease, self.mtime = snap, space, lease, mtime
        self.paths: dict[str, _Path] = {}
        self.children = {path: set(names) for path, names in snap.children.items()}
        self.counters: dict[str, int] = {}
        self.assumed: list[bytes] = []  # keys not read, taken for absent

    def read(self, key: bytes) -> dict[str, Any] | None:
        """The snapshot's key-value at ``key``; a key not read (a sequential create's name) is
        taken for absent, and the plan pins it so (``assumed``)."""
        if key not in self.snap.kvs:
            self.assumed.append(key)
            return None
        return self.snap.kvs[key]

    def state(self, path: str) -> _Path:
        if path not in self.paths:
            kv = self.read(self.space.node(path))
            node = node_of(path, kv, self.read(self.space.incarnation(path)))
            self.paths[path] = _Path(node, node)
        return self.paths[path]

    def exists(self, path: str) -> Node | None:
        if path == "/":
            return Node(b"", 0, 0, 0, 0.0, 0)
        return self.state(path).now

    def named(self, op: Create) -> Create:
        if not op.sequential:
            return op
        parent = parent_of(op.path)
        if parent not in self.counters:
            kv = self.snap.kvs.get(self.space.counter(parent))
            try:
                self.counters[parent] = int(unb64(kv["value"])) if kv else 0
            except ValueError:
                raise DriverError(f"unreadable sequence counter of {parent}") from None
        self.counters[parent] += 1
        return Create(f"{op.path}{self.counters[parent]:010d}", op.data, op.ephemeral)

    def apply(self, op: Op) -> str | Stat | None:
        if isinstance(op, Create):
            return self.create(op)
        node = self.exists(op.path)
        check_version(op.path, op.version, None if node is None else node.version)
        assert node is not None
        if isinstance(op, Check):
            return None
        if op.path == "/":
            raise ConfigurationError("the root node holds no data on etcd")
        state = self.state(op.path)
        state.written = True
        if isinstance(op, Delete):
            check_empty(op.path, children=bool(self.children.get(op.path)))
            state.now = None
            self.children.get(parent_of(op.path), set()).discard(op.path.rsplit("/", 1)[1])
            return None
        state.sets += 1
        state.now = replace(node, data=op.data, version=node.version + 1, mtime=self.mtime)
        return state.now.stat(len(self.children.get(op.path, ())))

    def create(self, op: Create) -> str:
        exists = self.exists(op.path) is not None
        parent = parent_of(op.path)
        above = None if exists else self.exists(parent)  # a node that exists has its parent
        check_create(
            op.path,
            exists=exists,
            parent=above is not None,
            parent_ephemeral=bool(above and above.lease),
        )
        state = self.state(op.path)
        lease = self.lease if op.ephemeral else 0
        state.now = Node(op.data, 0, 0, lease, self.mtime, 0)
        state.reborn, state.sets, state.written = True, 0, True
        self.children.setdefault(parent, set()).add(op.path.rsplit("/", 1)[1])
        return op.path

    def compares(self) -> list[dict[str, Any]]:
        """Every key read pinned as it was, and no child born since under a deleted node.

        An incarnation record is written only by a transaction that writes its node's key
        too, and expires with the node's lease: the node's pin holds its record still, so a
        node costs one compare, not two (etcd's limit counts compares)."""
        pinned = [*self.snap.kvs.items(), *((key, None) for key in self.assumed)]
        keys = {key for key, _ in pinned}
        rules = []
        for key, kv in pinned:
            where = self.space.path_of(key)
            if where and where[0] == "incarnation" and self.space.node(where[1]) in keys:
                continue
            if kv is None:
                rules.append(compare(key, "CREATE", "EQUAL", 0))
            else:
                rules.append(compare(key, "MOD", "EQUAL", kv_int(kv, "mod_revision")))
        for path in self.snap.children:
            if path in self.paths and self.paths[path].now is None:
                start, end = self.space.children(path)
                rules.append(compare(start, "CREATE", "LESS", self.snap.revision + 1, end))
        return rules

    def writes(self) -> list[dict[str, Any]]:
        """Each key's final state, written once."""
        writes = []
        for parent, count in self.counters.items():
            writes.append(put(self.space.counter(parent), b"%d" % count))
        for path, state in self.paths.items():
            if state.written:
                writes.extend(self._outcome(path, state))
        return writes

    def _outcome(self, path: str, state: _Path) -> list[dict[str, Any]]:
        key, record_key = self.space.node(path), self.space.incarnation(path)
        before, now = state.before, state.now
        has_record = self.snap.kvs.get(record_key) is not None
        if now is None:
            if before is None:  # created and deleted again: nothing to write
                return []
            return [remove(key), *([remove(record_key)] if has_record else [])]
        writes = [put(key, pack_value(now.data, now.mtime), now.lease)]
        etcd_version = (before.etcd_version if before else 0) + 1  # the key's, after the put
        base = etcd_version - now.version  # Stat.version = the key's version - base
        if state.reborn:
            record = None if base == 1 and before is None else Incarnation(base)
        elif base != (before.etcd_version - before.version if before else 1):
            record = Incarnation(base, now.created)  # the created kept: the record moves on
        else:
            return writes
        if record is not None:
            writes.append(put(record_key, record.encode(), now.lease))
        elif has_record:  # left over from an earlier node of this path
            writes.append(remove(record_key))
        return writes


def plan(ops: Sequence[Op], snap: Snapshot, space: KeySpace, lease: int, mtime: float) -> Plan:
    """The etcd transaction that applies ``ops`` if the store still is as ``snap`` found it.

    Raises TransactionFailed naming the first op that fails on ``snap``; ``lease`` is the
    session's lease (for ephemeral creates).
    """
    run = _Run(snap, space, lease, mtime)
    results: list[str | Stat | None] = []
    for index, op in enumerate(ops):
        try:
            results.append(run.apply(run.named(op) if isinstance(op, Create) else op))
        except NODE_ERRORS as exc:
            raise TransactionFailed(index, exc) from None
    return Plan(run.compares(), run.writes(), results, run.assumed)
