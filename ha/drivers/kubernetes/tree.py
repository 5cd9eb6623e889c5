"""The driver's node tree as one ConfigMap, and the operations on it as pure functions.

Kubernetes gives compare-and-set on one object at a time, and an ``ha`` transaction (an epoch
bump with a fenced write, a queue node with its breadcrumb) spans several nodes, so every node
of a driver's root lives in one ConfigMap (Flink's answer: lock, leader and pointers in one
ConfigMap, checked inside the CAS)::

    ConfigMap NAME-ha   labels: app.kubernetes.io/managed-by=ha, ha.io/root=NAME
      data:
        meta            {"format": 1, "txn": 12, "seq": 7, "sessions": ["00ab...", ...],
                         "last": ["/a"], "log": [[11, ["/b", "/c"]], [12, ["/a"]]]}
      binaryData:
        n.a.b           node /a/b: "VERSION CREATED OWNER MTIME\\n" then the node's bytes

A node's key is its path with ``/`` as ``.``; letters, digits and ``-`` as they are; every
other byte (``.`` and ``_`` too) as ``_XX`` (hex): ConfigMap keys allow ``[-._a-zA-Z0-9]``
only, and the mapping must be one-to-one. ``txn`` numbers the writing transactions (a node's
``Stat.created``), ``seq`` gives sequential suffixes, and ``sessions`` lists the sessions
whose ephemeral nodes may be created: a session reaped is struck off in the same write that
deletes its ephemeral nodes, so a late create of the dead session cannot leave one behind.
``last`` names the paths the last write touched, and ``log`` those of the last ``LOG``
writes with their numbers: a watcher that missed writes (a 410) still tells their events in
the order they were written (``diff``).

``apply`` runs a transaction on a ``Tree`` exactly as ``ha.drivers.base`` says (each op sees
the earlier ones) and returns the new tree; the driver then writes it with the
resourceVersion it read (``driver``). Kubernetes refuses objects over 1 MiB: ``encode`` says
so in one line before the server does.
"""

from __future__ import annotations

import base64
import json
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any

from ...errors import (
    ConfigurationError,
    CorruptData,
    DriverError,
    SessionExpired,
    TransactionFailed,
)
from .._nodes import NODE_ERRORS, check_create, check_empty, check_version
from ..base import Check, Create, Delete, NodeEvent, NodeEventKind, Op, SetData, Stat, parent_of

__all__ = (
    "FORMAT",
    "LIMIT",
    "Entry",
    "Tree",
    "TooLarge",
    "apply",
    "diff",
    "key_of",
    "order",
    "path_of",
)

FORMAT = 1
LIMIT = 1024 * 1024  # data + binaryData of one ConfigMap, as the API server counts it
LOG = 16  # writes whose touched paths the tree keeps (the order of events across a 410)
MAX_KEY = 253
MANAGED = {"app.kubernetes.io/managed-by": "ha"}
_SPECIAL = re.compile(rb"[^A-Za-z0-9-]")  # escaped in keys
_KEY = re.compile(r"n(?:\.(?:[A-Za-z0-9-]|_[0-9a-f]{2})+)+")  # a node's key: n.SEGMENT...
_ESCAPED = re.compile(rb"\.|_[0-9a-f]{2}")


class TooLarge(DriverError):
    """The tree would outgrow a ConfigMap (1 MiB); nothing was written."""


# --- keys -----------------------------------------------------------------------------------


@lru_cache(maxsize=1 << 16)
def key_of(path: str) -> str:
    """The ConfigMap key of the node at ``path`` (not the root, which is not stored)."""
    key = "n" + _SPECIAL.sub(_escape, path.encode()).decode("ascii")
    if len(key) > MAX_KEY:
        raise ConfigurationError(
            f"node path too long for a ConfigMap key ({len(key)} > {MAX_KEY}): {path[:60]}..."
        )
    return key


@lru_cache(maxsize=1 << 16)
def path_of(key: str) -> str | None:
    """The path a key names, or None if it is not one of ours."""
    if not _KEY.fullmatch(key):
        return None
    try:
        return _ESCAPED.sub(_unescape, key[1:].encode()).decode()
    except UnicodeDecodeError:
        return None


def _escape(match: re.Match[bytes]) -> bytes:
    char = match.group()
    return b"." if char == b"/" else b"_%02x" % char[0]


def _unescape(match: re.Match[bytes]) -> bytes:
    text = match.group()
    return b"/" if text == b"." else bytes([int(text[1:], 16)])


# --- nodes ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Entry:
    """One node as stored."""

    data: bytes
    version: int = 0
    created: int = 0  # the number of the transaction that created it
    owner: int | None = None  # the session of an ephemeral node
    mtime: float = 0.0

    def encode(self) -> bytes:
        owner = "-" if self.owner is None else f"{self.owner:x}"
        return f"{self.version} {self.created} {owner} {self.mtime!r}\n".encode() + self.data

    @classmethod
    def decode(cls, path: str, raw: bytes) -> Entry:
        head, sep, data = raw.partition(b"\n")
        try:
            version, created, owner, mtime = head.decode().split(" ")
            return cls(
                data, int(version), int(created), None if owner == "-" else int(owner, 16),
                float(mtime),
            )  # fmt: skip
        except ValueError:
            raise CorruptData(path, "the ConfigMap entry was not written by ha") from None


@dataclass(slots=True)
class Tree:
    """The nodes of one root and its counters, as of one resourceVersion."""

    nodes: dict[str, Entry] = field(default_factory=dict)
    sessions: set[int] = field(default_factory=set)
    txn: int = 0  # the last writing transaction's number
    seq: int = 0  # the last sequential suffix given
    version: str = ""  # the ConfigMap's resourceVersion ("": not read from the server)
    touched: list[str] = field(default_factory=list)  # by the last write, in op order
    log: list[tuple[int, list[str]]] = field(default_factory=list)  # (txn, touched), oldest first

    def node(self, path: str) -> Entry | None:
        if path == "/":
            return Entry(b"")
        return self.nodes.get(path)

    def children(self, path: str) -> list[str]:
        """Names of the direct children of ``path``, sorted."""
        head = "/" if path == "/" else path + "/"
        return sorted(
            p[len(head) :] for p in self.nodes if p.startswith(head) and "/" not in p[len(head) :]
        )

    def stat(self, path: str) -> Stat | None:
        entry = self.node(path)
        if entry is None:
            return None
        count = len(self.children(path))
        return Stat(entry.version, entry.owner, entry.mtime, count, entry.created)

    def subtree(self, path: str) -> list[str]:
        """``path`` and every node under it, children before parents."""
        below = sorted((p for p in self.nodes if p.startswith(path + "/")), reverse=True)
        return [*below, path] if path in self.nodes else []

    # --- the ConfigMap --------------------------------------------------------------------

    def size(self) -> int:
        """The bytes of the ConfigMap holding this tree, as the API server counts them (its
        ``data`` and ``binaryData``, keys and values), which must stay within ``LIMIT``."""
        values = {key_of(p): _value_of(e) for p, e in self.nodes.items()}
        return _size({"meta": json.dumps(self._meta(), separators=(",", ":"))}, values)

    def _meta(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "txn": self.txn,
            "seq": self.seq,
            "last": self.touched,
            "log": [[txn, paths] for txn, paths in self.log],
            "sessions": [f"{s:x}" for s in sorted(self.sessions)],
        }

    def encode(self, namespace: str, name: str, root: str) -> dict[str, Any]:
        """The ConfigMap holding this tree (with its resourceVersion, if read); TooLarge."""
        data = {"meta": json.dumps(self._meta(), separators=(",", ":"))}
        values = {key_of(p): _value_of(e) for p, e in self.nodes.items()}
        size = _size(data, values)
        if size > LIMIT:
            raise TooLarge(
                f"the ha tree would hold {size} bytes, over the 1 MiB a Kubernetes ConfigMap"
                f" may hold ({namespace}/{name}): keep large data out of ha nodes"
            )
        metadata: dict[str, Any] = {
            "name": name,
            "namespace": namespace,
            "labels": {**MANAGED, "ha.io/root": root},
        }
        if self.version:
            metadata["resourceVersion"] = self.version
        return {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": metadata,
            "data": data,
            "binaryData": values,
        }

    @classmethod
    def decode(cls, body: dict[str, Any], where: str) -> Tree:
        """The tree in a ConfigMap; CorruptData naming ``where`` if it is not ha's."""
        metadata = body.get("metadata") or {}
        labels = metadata.get("labels") or {}
        data = body.get("data") or {}
        try:
            meta = json.loads(data["meta"])
            if labels.get("app.kubernetes.io/managed-by") != "ha" or meta["format"] != FORMAT:
                raise ValueError
            tree = cls(
                txn=int(meta["txn"]),
                seq=int(meta["seq"]),
                touched=[str(p) for p in meta.get("last") or []],
                log=[(int(txn), [str(p) for p in paths]) for txn, paths in meta.get("log") or []],
                sessions={int(s, 16) for s in meta["sessions"]},
                version=str(metadata.get("resourceVersion") or ""),
            )
        except (KeyError, ValueError, TypeError):
            raise CorruptData(
                where, "this ConfigMap exists but does not hold an ha tree (foreign data)"
            ) from None
        for key, value in (body.get("binaryData") or {}).items():
            path = path_of(key)
            if path is None:
                raise CorruptData(where, f"the ConfigMap has a key ha did not write: {key!r}")
            tree.nodes[path] = _entry_of(path, value)
        return tree


# Most entries are the same from one version of the tree to the next: their codings are kept.


@lru_cache(maxsize=1 << 16)
def _value_of(entry: Entry) -> str:
    return base64.b64encode(entry.encode()).decode("ascii")


@lru_cache(maxsize=1 << 16)
def _entry_of(path: str, value: str) -> Entry:
    try:
        raw = base64.b64decode(value, validate=True)
    except ValueError:
        raise CorruptData(path, "the ConfigMap entry is not base64") from None
    return Entry.decode(path, raw)


def _size(data: dict[str, str], values: dict[str, str]) -> int:
    """What the API server counts of a ConfigMap: keys and values of ``data`` (text) and of
    ``binaryData`` (the bytes its base64 holds)."""
    size = sum(len(k) + _raw_size(v) for k, v in values.items())
    return size + sum(len(k) + len(v.encode()) for k, v in data.items())


def _raw_size(value: str) -> int:
    """The size of the bytes a base64 text holds (what the API server counts)."""
    return len(value) * 3 // 4 - value[-2:].count("=")


# --- transactions ---------------------------------------------------------------------------


def apply(
    tree: Tree, ops: Sequence[Op], session: int | None, now: float | None = None
) -> tuple[Tree, list[str | Stat | None]]:
    """``ops`` applied to ``tree`` (untouched): the new tree and each op's result, or
    TransactionFailed naming the first failing op. SessionExpired if an ephemeral create's
    session is not (or no longer) registered."""
    now = time.time() if now is None else now
    writes = any(not isinstance(op, Check) for op in ops)
    new = Tree(dict(tree.nodes), set(tree.sessions), tree.txn + writes, tree.seq, tree.version)
    new.log = _logged(tree, new.txn, new.touched)  # the list filled in below
    results: list[str | Stat | None] = []
    for index, op in enumerate(ops):
        try:
            result = _one(new, op, session, now)
        except NODE_ERRORS as exc:
            raise TransactionFailed(index, exc) from None
        results.append(result)
        if not isinstance(op, Check):
            new.touched.append(result if isinstance(result, str) else op.path)
    return new, results


def _one(tree: Tree, op: Op, session: int | None, now: float) -> str | Stat | None:
    """Apply one op to ``tree`` in place; its result (created path, new Stat, or None)."""
    if isinstance(op, Create):
        path = op.path
        if op.sequential:
            tree.seq += 1
            path = f"{op.path}{tree.seq:010d}"
        if op.ephemeral and (session is None or session not in tree.sessions):
            raise SessionExpired("the Kubernetes session is gone (its Lease was reaped)")
        parent = None if path == "/" else tree.node(parent_of(path))
        check_create(
            path,
            exists=tree.node(path) is not None,
            parent=parent is not None,
            parent_ephemeral=parent is not None and parent.owner is not None,
        )
        owner = session if op.ephemeral else None
        tree.nodes[path] = Entry(op.data, 0, tree.txn, owner, now)
        return path
    entry = tree.node(op.path)
    check_version(op.path, op.version, None if entry is None else entry.version)
    assert entry is not None
    if isinstance(op, Delete):
        check_empty(op.path, children=bool(tree.children(op.path)))
        del tree.nodes[op.path]
    elif isinstance(op, SetData):
        tree.nodes[op.path] = replace(entry, data=op.data, version=entry.version + 1, mtime=now)
        return tree.stat(op.path)
    return None


def reap(tree: Tree, sessions: Iterable[int]) -> tuple[Tree, list[str]]:
    """``tree`` without ``sessions``: struck off, their ephemeral nodes deleted. The new tree
    (a new transaction if anything went) and the deleted paths."""
    dead = set(sessions)
    gone = sorted(p for p, e in tree.nodes.items() if e.owner in dead)
    if not gone and not dead & tree.sessions:
        return tree, []
    nodes = {p: e for p, e in tree.nodes.items() if e.owner not in dead}
    log = _logged(tree, tree.txn + 1, gone)
    return Tree(nodes, tree.sessions - dead, tree.txn + 1, tree.seq, tree.version, gone, log), gone


def _logged(tree: Tree, txn: int, touched: list[str]) -> list[tuple[int, list[str]]]:
    """``tree``'s log with the write ``txn`` added (if it is one), the last LOG writes."""
    if txn == tree.txn:
        return list(tree.log)
    return [*tree.log, (txn, touched)][-LOG:]


def diff(
    before: Tree, after: Tree, paths: Iterable[str], *, coalesced: bool = False
) -> list[NodeEvent]:
    """The events of ``paths`` between two states of the tree (a node created again in
    between: DELETED then CREATED), each path's where it was first written after ``before``
    (``order``): the events of one write in the order of its ops, as ZooKeeper delivers a
    multi's (a successor must see a leader's breadcrumb go no later than its node), and of
    several writes in the order of the writes (a standby must hear of a pause written before
    its leader's exit first).

    ``coalesced``: ``after`` may be many writes later (a re-read after a 410). A node found
    created whose version says it was written since is then reported CHANGED too: the watch
    can lag behind a reader, who may have subscribed after that creation and before the
    change, which a subscriber never misses (the server-restart test lost it, 1 run in 10)."""
    events: list[NodeEvent] = []
    for path in order(before, after, paths):
        old, new = before.node(path), after.node(path)
        kinds: list[NodeEventKind] = []
        if old is None and new is not None:
            kinds = [NodeEventKind.CREATED]
        elif old is not None and new is None:
            kinds = [NodeEventKind.DELETED]
        elif old is not None and new is not None and path != "/":
            if old.created != new.created:
                kinds = [NodeEventKind.DELETED, NodeEventKind.CREATED]
            elif old.version != new.version:
                kinds = [NodeEventKind.CHANGED]
        if coalesced and kinds[-1:] == [NodeEventKind.CREATED] and new is not None and new.version:
            kinds.append(NodeEventKind.CHANGED)
        events += [NodeEvent(path, kind) for kind in kinds]
    return events


def order(before: Tree, after: Tree, paths: Iterable[str]) -> list[str]:
    """``paths`` in the order of their first write after ``before``, as ``after``'s log
    tells (a tree written without a log: its last write's). Paths the log does not name
    come first, by name: written before the log begins, if at all. Exact when ``after`` is
    at most LOG writes past ``before``."""
    log = after.log or [(after.txn, after.touched)]
    first: dict[str, int] = {}
    for txn, touched in log:
        if txn > before.txn:
            for path in touched:
                first.setdefault(path, len(first))
    return sorted(set(paths), key=lambda path: (first.get(path, -1), path))


Plan = Callable[[Tree], Sequence[Op]]  # the ops of a transaction, decided on the tree read
