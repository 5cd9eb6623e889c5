"""A recursive delete as one etcd transaction: one range delete per level of the subtree.

etcd counts a transaction's operations, not the keys they touch, against its limit
(``--max-txn-ops``, 128 by default), and a delete per node went past it at about 60 nodes. The
nodes under ``/a`` at one depth are one key range (``KeySpace.level``), so a subtree of any
size goes in one range delete per level it has, plus the node itself and the incarnation
records below it (one more range).

The read (``Levels``) takes the node and how many keys each level below it holds, at one
revision; the transaction (``guarded``) pins the node as read, and at every level of the
subtree and the one just below it no key born since: a node created under the subtree in
between makes etcd refuse, and the driver reads again. All or nothing, as a ZooKeeper multi.

A subtree deeper than ``LEVELS`` levels cannot be one transaction: its deepest levels go first
(``unguarded``), in transactions of their own; only the last one, with the node, is atomic.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .keys import MAX_DEPTH, KeySpace, kv_int
from .mapping import Node, compare, get, node_of, remove

__all__ = ("LEVELS", "Levels", "guarded", "reads", "unguarded")

LEVELS = 100  # levels per transaction: its range deletes and compares stay under 128
BATCH = 16  # levels counted per read


def reads(space: KeySpace, path: str, depths: range) -> list[dict[str, Any]]:
    """The node, its incarnation record, and the number of keys at each depth of ``depths``
    under it."""
    counts = [get(*space.level(path, depth), count_only=True) for depth in depths]
    return [get(space.node(path)), get(space.incarnation(path)), *counts]


@dataclass(frozen=True, slots=True)
class Levels:
    """The node at ``path`` as read at ``revision``, and the deepest level below it that holds
    a key (``path``'s own depth: no descendant); ``complete``: a level with no key was seen
    below it (a node's parent always exists, so none lies deeper)."""

    path: str
    revision: int
    kv: dict[str, Any] | None
    record: dict[str, Any] | None
    deepest: int
    complete: bool = False

    @property
    def node(self) -> Node | None:
        return node_of(self.path, self.kv, self.record)

    @property
    def depth(self) -> int:
        return self.path.count("/")

    @classmethod
    def first(cls, path: str, revision: int, replies: list[dict[str, Any]]) -> Levels:
        """From the replies to ``reads(space, path, depths)``, ``depths`` starting just below
        ``path``."""
        kv, record = ((r.get("kvs") or [None])[0] for r in replies[:2])
        return cls(path, revision, kv, record, path.count("/")).more(replies[2:])

    def more(self, counts: list[dict[str, Any]]) -> Levels:
        """With the next levels' counts (the replies to ``get(level, count_only=True)``)."""
        deepest, complete = self.deepest, False
        for reply in counts:
            if not int(reply.get("count") or 0):
                complete = True
                break
            deepest += 1
        return Levels(self.path, self.revision, self.kv, self.record, deepest, complete)


def guarded(space: KeySpace, levels: Levels) -> dict[str, Any]:
    """The transaction that deletes the whole subtree if nothing moved since ``levels``."""
    path, kv, record = levels.path, levels.kv, levels.record
    assert kv is not None
    rules = [compare(space.node(path), "MOD", "EQUAL", kv_int(kv, "mod_revision"))]
    if record is None:
        rules.append(compare(space.incarnation(path), "CREATE", "EQUAL", 0))
    else:
        revision = kv_int(record, "mod_revision")
        rules.append(compare(space.incarnation(path), "MOD", "EQUAL", revision))
    below = range(levels.depth + 1, levels.deepest + 1)
    # no node born since at any level of the subtree, nor just below its deepest
    for depth in range(below.start, min(below.stop, MAX_DEPTH) + 1):
        start, end = space.level(path, depth)
        rules.append(compare(start, "CREATE", "LESS", levels.revision + 1, end))
    writes = [remove(*space.level(path, depth)) for depth in below]
    writes += [remove(*space.incarnations_below(path)), remove(space.node(path))]
    if record is not None:
        writes.append(remove(space.incarnation(path)))
    return {"compare": rules, "success": writes}


def unguarded(space: KeySpace, levels: Levels) -> dict[str, Any]:
    """A transaction that deletes the deepest ``LEVELS`` levels of a subtree too deep for one."""
    depths = range(levels.deepest - LEVELS + 1, levels.deepest + 1)
    return {"success": [remove(*space.level(levels.path, depth)) for depth in depths]}
