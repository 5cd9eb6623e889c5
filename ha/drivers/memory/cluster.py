"""The memory backend's server: a named tree of nodes, its sessions and their expiry.

``MemoryCluster`` answers its clients (``ha.drivers.memory.driver``) at once, in the caller's
thread: a heartbeat records contact, ``apply`` checks a transaction against the tree and applies
all of it or none, and a change is pushed to the drivers watching its path. Its clock is
``time.monotonic()``.

Two cluster-wide counters stand in for ZooKeeper's zxid: ``zxid`` numbers every transaction that
writes (its creations' ``Stat.created``), and ``sequence`` gives sequential creates their
suffixes. Neither goes back, so a suffix is never given twice, even under another parent.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from ...errors import TransactionFailed
from .._nodes import NODE_ERRORS, check_create, check_empty, check_version
from ..base import (
    Check,
    Create,
    Delete,
    NodeEvent,
    NodeEventKind,
    Op,
    SessionLease,
    SetData,
    Stat,
    parent_of,
)

if TYPE_CHECKING:
    from .driver import MemoryDriver

__all__ = ("MemoryCluster",)


@dataclass(slots=True)
class _Node:
    data: bytes
    version: int = 0
    ephemeral_owner: int | None = None
    mtime: float = field(default_factory=time.time)
    children: set[str] = field(default_factory=set)
    created: int = 0  # the zxid of the transaction that created it

    def stat(self) -> Stat:
        return Stat(
            self.version, self.ephemeral_owner, self.mtime, len(self.children), self.created
        )


@dataclass(slots=True)
class _Session:
    id: int
    timeout: float
    last_heartbeat: float
    driver: MemoryDriver
    expired: bool = False


class MemoryCluster:
    """A named in-process coordination server. ``MemoryCluster.named(name)`` shares one."""

    _registry: dict[str, MemoryCluster] = {}
    _ids = itertools.count(0x1000)

    def __init__(self, name: str) -> None:
        self.name = name
        self.nodes: dict[str, _Node] = {"/": _Node(b"")}
        self.sessions: dict[int, _Session] = {}
        self.watchers: dict[str, set[MemoryDriver]] = {}  # path -> drivers watching it
        self.ephemerals: dict[int, set[str]] = {}  # session -> its ephemeral paths
        self.ops = 0  # operations served, for tests and benchmarks
        self.zxid = 0  # the number of the last transaction that wrote
        self.sequence = 0  # the last suffix a sequential create was given
        self._next_reap = 0.0
        self._down = False  # ``server_down``: no session ages

    @classmethod
    def named(cls, name: str) -> MemoryCluster:
        cluster = cls._registry.get(name)
        if cluster is None:
            cluster = cls._registry[name] = cls(name)
        return cluster

    @classmethod
    def drop(cls, name: str) -> None:
        """Forget a named cluster (its data is gone for drivers that connect later)."""
        cls._registry.pop(name, None)

    # --- sessions ---------------------------------------------------------------------------

    def open_session(self, driver: MemoryDriver, timeout: float) -> int:
        sid = next(self._ids)
        self.sessions[sid] = _Session(sid, timeout, time.monotonic(), driver)
        return sid

    def heartbeat(self, sid: int) -> bool:
        """Record contact from ``sid``; False if the session is gone."""
        self.reap()
        session = self.sessions.get(sid)
        if session is None or session.expired:
            return False
        session.last_heartbeat = time.monotonic()
        return True

    def alive(self, sid: int) -> bool:
        session = self.sessions.get(sid)
        return session is not None and not session.expired

    def lease(self, sid: int) -> SessionLease | None:
        """When ``sid`` was last heard from and when the tracker ends it (exact: one clock)."""
        session = self.sessions.get(sid)
        if session is None or session.expired:
            return None
        ago = time.monotonic() - session.last_heartbeat
        return SessionLease(ago, session.timeout - ago, session.timeout)

    def server_down(self) -> None:
        """A fault: the server is down, so nothing expires a session, however long its client is
        cut off (cut the drivers off too: ``faults(driver).disconnect()``)."""
        self._down = True

    def server_up(self) -> None:
        """The server is back and every session's clock starts afresh: a session outlives a
        silence longer than its timeout, as ZooKeeper's sessions do after the ensemble loads
        its snapshot, etcd's leases after a leader change, and a Kubernetes Lease whose peers
        could not reap it while the API server was down."""
        self._down = False
        now = time.monotonic()
        for session in self.sessions.values():
            session.last_heartbeat = now

    def reap(self) -> None:
        """Expire every session not heard from for its timeout (the server's session tracker).

        It runs at most every 5 ms: checking every session on every call would make a cluster
        of n sessions cost O(n) per operation. Expiry may thus come up to 5 ms late, never early.
        """
        now = time.monotonic()
        if self._down or now < self._next_reap:
            return
        self._next_reap = now + 0.005
        for session in list(self.sessions.values()):
            if not session.expired and now - session.last_heartbeat > session.timeout:
                self.expire(session.id)

    def expire(self, sid: int) -> None:
        """End a session now, deleting its ephemeral nodes (a fault, or the session tracker)."""
        session = self.sessions.pop(sid, None)
        if session is None:
            return
        session.expired = True
        for path in sorted(self.ephemerals.pop(sid, ())):
            if path in self.nodes:
                self.remove(path)
        session.driver.server_expired(sid)

    def close_session(self, sid: int) -> None:
        self.expire(sid)

    # --- watches ----------------------------------------------------------------------------

    def watch(self, path: str, driver: MemoryDriver) -> None:
        """Tell ``driver`` of the changes at ``path`` (the server's table of watches, as a
        ZooKeeper server keeps one: the client's subscriptions are the driver's own)."""
        self.watchers.setdefault(path, set()).add(driver)

    def unwatch(self, path: str, driver: MemoryDriver) -> None:
        watchers = self.watchers.get(path)
        if watchers is not None:
            watchers.discard(driver)
            if not watchers:
                del self.watchers[path]

    # --- nodes ------------------------------------------------------------------------------

    def _notify(self, path: str, kind: NodeEventKind) -> None:
        event = NodeEvent(path, kind)
        for driver in list(self.watchers.get(path, ())):
            driver.server_event(event)

    def remove(self, path: str) -> None:
        """Delete the node at ``path`` and everything under it, telling the watchers."""
        node = self.nodes[path]
        for child in list(node.children):  # children first: each unlinks itself from us
            self.remove(f"{path.rstrip('/')}/{child}")
        del self.nodes[path]
        if node.ephemeral_owner is not None:
            self.ephemerals.get(node.ephemeral_owner, set()).discard(path)
        if path != "/":
            self.nodes[parent_of(path)].children.discard(path.rsplit("/", 1)[1])
        self._notify(path, NodeEventKind.DELETED)

    def _check_op(self, op: Op, sid: int, staged: dict[str, _Node | None]) -> None:
        """Validate ``op`` against the staged view of the tree; raise the op's error."""

        def node_at(path: str) -> _Node | None:
            return staged[path] if path in staged else self.nodes.get(path)

        if isinstance(op, Create):
            parent = None if op.path == "/" else node_at(parent_of(op.path))
            check_create(
                op.path,
                exists=node_at(op.path) is not None,
                parent=parent is not None,
                parent_ephemeral=parent is not None and parent.ephemeral_owner is not None,
            )
            staged[op.path] = _Node(op.data, ephemeral_owner=sid if op.ephemeral else None)
            return
        node = node_at(op.path)
        check_version(op.path, op.version, None if node is None else node.version)
        assert node is not None
        if isinstance(op, Delete):
            live_children = {
                c for c in node.children if node_at(f"{op.path.rstrip('/')}/{c}") is not None
            }
            check_empty(
                op.path,
                children=bool(live_children)
                or any(p.startswith(op.path + "/") and n is not None for p, n in staged.items()),
            )
            staged[op.path] = None
        elif isinstance(op, SetData):  # later ops of the transaction see the new version
            staged[op.path] = replace(node, data=op.data, version=node.version + 1)

    def _named(self, op: Op) -> Op:
        """``op`` with a sequential create's suffix appended (given even if the op fails)."""
        if not isinstance(op, Create) or not op.sequential:
            return op
        self.sequence += 1
        return Create(f"{op.path}{self.sequence:010d}", op.data, op.ephemeral)

    def apply(self, ops: Sequence[Op], sid: int) -> list[str | Stat | None]:
        """Check every op (from ``checked_op``) against the tree as the earlier ones leave it,
        then apply all of them, or raise TransactionFailed."""
        self.ops += 1
        ops = [self._named(op) for op in ops]
        staged: dict[str, _Node | None] = {}
        for index, op in enumerate(ops):
            try:
                self._check_op(op, sid, staged)
            except NODE_ERRORS as exc:
                raise TransactionFailed(index, exc) from None
        if any(not isinstance(op, Check) for op in ops):
            self.zxid += 1
        results: list[str | Stat | None] = []
        for op in ops:
            if isinstance(op, Create):
                owner = sid if op.ephemeral else None
                self.nodes[op.path] = _Node(op.data, ephemeral_owner=owner, created=self.zxid)
                if op.ephemeral:
                    self.ephemerals.setdefault(sid, set()).add(op.path)
                if op.path != "/":
                    self.nodes[parent_of(op.path)].children.add(op.path.rsplit("/", 1)[1])
                self._notify(op.path, NodeEventKind.CREATED)
                results.append(op.path)
            elif isinstance(op, SetData):
                node = self.nodes[op.path]
                node.data, node.version, node.mtime = op.data, node.version + 1, time.time()
                self._notify(op.path, NodeEventKind.CHANGED)
                results.append(node.stat())
            elif isinstance(op, Delete):
                self.remove(op.path)
                results.append(None)
            else:
                results.append(None)
        return results
