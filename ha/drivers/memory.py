"""The in-memory backend: ``memory://NAME``, many sessions of one process on a named cluster.

It models a ZooKeeper server faithfully enough to test the layers above against: sessions that
the server expires ``session_timeout`` after their last heartbeat, a client that pings every
third of the timeout and declares itself disconnected after two thirds without an answer (as
ZooKeeper's client does), ephemeral nodes, versions, multi-op transactions, watches that are held
back while the client is cut off. Faults are injected on the driver (``disconnect``,
``partition``, ``freeze``, ``crash``, ``fail_next``, ``delay``) and on the cluster (``expire``).

Server time is ``time.monotonic()``, client time ``anyio.current_time()``: both are monotonic
clocks of one machine running at the same rate, which is all the timing assumption needs.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Self

import anyio
import anyio.lowlevel

from .._background import BackgroundTask
from ..errors import (
    AccessDenied,
    BadVersion,
    ConfigurationError,
    ConnectionLost,
    DriverError,
    NodeExists,
    NoNode,
    NotEmpty,
    SessionExpired,
    TransactionFailed,
)
from ._input import checked_op, node_data
from ._options import OptionTable
from .base import (
    Capabilities,
    Check,
    ConnectionEvent,
    ConnectionState,
    Create,
    Delete,
    Driver,
    NodeEvent,
    NodeEventKind,
    Op,
    SessionKind,
    SetData,
    Stat,
    parent_of,
    validate_path,
)

__all__ = ("MemoryCluster", "MemoryDriver")


@dataclass(slots=True)
class _Node:
    data: bytes
    version: int = 0
    ephemeral_owner: int | None = None
    mtime: float = field(default_factory=time.time)
    children: set[str] = field(default_factory=set)

    def stat(self) -> Stat:
        return Stat(self.version, self.ephemeral_owner, self.mtime, len(self.children))


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
        self._next_reap = 0.0

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

    def reap(self) -> None:
        """Expire every session not heard from for its timeout (the server's session tracker).

        It runs at most every 5 ms: checking every session on every call would make a cluster
        of n sessions cost O(n) per operation. Expiry may thus come up to 5 ms late, never early.
        """
        now = time.monotonic()
        if now < self._next_reap:
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
                self._remove(path)
        session.driver._server_expired(sid)

    def close_session(self, sid: int) -> None:
        self.expire(sid)

    # --- nodes ------------------------------------------------------------------------------

    def _notify(self, path: str, kind: NodeEventKind) -> None:
        event = NodeEvent(path, kind)
        for driver in list(self.watchers.get(path, ())):
            driver._server_event(event)

    def _remove(self, path: str) -> None:
        node = self.nodes[path]
        for child in list(node.children):  # children first: each unlinks itself from us
            self._remove(f"{path.rstrip('/')}/{child}")
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
            if node_at(op.path) is not None:
                raise NodeExists(op.path)
            if op.path == "/" or node_at(parent_of(op.path)) is None:
                raise NoNode(parent_of(op.path))
            parent = node_at(parent_of(op.path))
            if parent is not None and parent.ephemeral_owner is not None:
                raise NoNode(f"{op.path} (ephemeral nodes cannot have children)")
            staged[op.path] = _Node(op.data, ephemeral_owner=sid if op.ephemeral else None)
            return
        node = node_at(op.path)
        if node is None:
            raise NoNode(op.path)
        if op.version != -1 and node.version != op.version:
            raise BadVersion(op.path, op.version, node.version)
        if isinstance(op, Delete):
            live_children = {
                c for c in node.children if node_at(f"{op.path.rstrip('/')}/{c}") is not None
            }
            if live_children or any(
                p.startswith(op.path + "/") and n is not None for p, n in staged.items()
            ):
                raise NotEmpty(op.path)
            staged[op.path] = None
        elif isinstance(op, SetData):  # later ops of the transaction see the new version
            staged[op.path] = replace(node, data=op.data, version=node.version + 1)

    def apply(self, ops: Sequence[Op], sid: int) -> list[str | Stat | None]:
        """Check every op (from ``checked_op``) against the tree as the earlier ones leave it,
        then apply all of them, or raise TransactionFailed."""
        self.ops += 1
        staged: dict[str, _Node | None] = {}
        for index, op in enumerate(ops):
            try:
                self._check_op(op, sid, staged)
            except (NodeExists, NoNode, BadVersion, NotEmpty) as exc:
                raise TransactionFailed(index, exc) from None
        results: list[str | Stat | None] = []
        for op in ops:
            if isinstance(op, Create):
                self.nodes[op.path] = _Node(op.data, ephemeral_owner=sid if op.ephemeral else None)
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
                self._remove(op.path)
                results.append(None)
            else:
                results.append(None)
        return results


_OPTIONS = OptionTable("memory", seconds=("session_timeout",))


class MemoryDriver(Driver):
    """A client of a ``MemoryCluster`` holding one session at a time."""

    capabilities = Capabilities(
        name="memory",
        cross_process=False,
        cross_host=False,
        durable=False,
        push_watches=True,
        sessions=SessionKind.SESSION,
    )

    def __init__(self, cluster: str | MemoryCluster = "default", *, session_timeout: float = 2.0):
        super().__init__()
        if session_timeout <= 0:
            raise ConfigurationError(f"session_timeout must be positive, got {session_timeout}")
        self.cluster = (
            cluster if isinstance(cluster, MemoryCluster) else MemoryCluster.named(cluster)
        )
        self._timeout = float(session_timeout)
        self._sid: int | None = None
        self._connected = False
        self._last_contact = 0.0
        self._pinger_task: BackgroundTask | None = None
        self._wake = anyio.Event()
        self._held: list[NodeEvent] = []
        # faults
        self._partitioned = False
        self._cut = False  # disconnected on purpose: no contact until reconnect()
        self._crashed = False
        self._frozen: anyio.Event | None = None
        self.delay = 0.0
        self._fail: list[DriverError] = []

    @classmethod
    def from_url(cls, url: str, **options: Any) -> Self:
        parsed = _OPTIONS.parse(url, scheme="memory", usage="memory://NAME")
        name = parsed.netloc or parsed.path.strip("/")
        if not name:
            raise ConfigurationError(f"expected memory://NAME, got {url!r}")
        return cls(name, **{**parsed.options, **_OPTIONS.keywords(options)})

    # --- lifecycle --------------------------------------------------------------------------

    async def start(self) -> None:
        if self._pinger_task is not None:
            raise RuntimeError("driver already started")
        self._open_session()
        self._pinger_task = BackgroundTask(self._pinger, name=f"memory pinger {self._sid:#x}")
        self._pinger_task.start()

    async def aclose(self) -> None:
        if self._pinger_task is None:
            return
        task, self._pinger_task = self._pinger_task, None
        if self._sid is not None and not self._crashed and self._reachable():
            self.cluster.close_session(self._sid)
        self._sid = None
        self._connected = False
        await task.stop()
        self._emit(ConnectionEvent(ConnectionState.CLOSED, None))

    def _open_session(self) -> None:
        now = anyio.current_time()  # before the server's reading: never later than its view
        self._sid = self.cluster.open_session(self, self._timeout)
        self._connected = True
        self._last_contact = now
        self._emit(ConnectionEvent(ConnectionState.CONNECTED, self._sid))

    # --- the client's heartbeat loop ---------------------------------------------------------

    async def _pinger(self) -> None:
        while True:
            wait = self._timeout / 3
            if self._connected and not self._reachable():
                # wake exactly when the read timeout runs out, to report DISCONNECTED on time
                lost_at = self._last_contact + self._timeout * 2 / 3
                wait = min(wait, max(0.0, lost_at - anyio.current_time()) + 0.001)
            with anyio.move_on_after(wait):
                await self._wake.wait()
            self._wake = anyio.Event()
            if self._crashed:
                return
            self._ping()

    def _ping(self) -> None:
        now = anyio.current_time()
        if self._sid is None:
            return
        if self._reachable():
            if self.cluster.heartbeat(self._sid):
                self._contact(now)
            else:
                self._learn_expired()
        elif self._connected and now - self._last_contact > self._timeout * 2 / 3:
            self._lose_contact()
        self.cluster.reap()

    def _reachable(self) -> bool:
        return not (self._partitioned or self._cut or self._crashed)

    def _contact(self, now: float) -> None:
        self._last_contact = now
        if not self._connected:
            self._connected = True
            self._emit(ConnectionEvent(ConnectionState.RECONNECTED, self._sid))
            held, self._held = self._held, []
            for event in held:
                self._emit(event)

    def _lose_contact(self) -> None:
        if self._connected:
            self._connected = False
            self._emit(ConnectionEvent(ConnectionState.DISCONNECTED, self._sid))

    def _learn_expired(self) -> None:
        old = self._sid
        self._held.clear()
        self._connected = False
        self._emit(ConnectionEvent(ConnectionState.EXPIRED, old))
        if self._pinger_task is not None and not self._crashed:
            self._open_session()

    def _watch_started(self, path: str) -> None:
        self.cluster.watchers.setdefault(path, set()).add(self)

    def _watch_stopped(self, path: str) -> None:
        watchers = self.cluster.watchers.get(path)
        if watchers is not None:
            watchers.discard(self)
            if not watchers:
                del self.cluster.watchers[path]

    # --- called by the cluster ---------------------------------------------------------------

    def _server_event(self, event: NodeEvent) -> None:
        if self._crashed:
            return
        if self._connected and self._reachable():
            self._emit(event)
        else:
            self._held.append(event)

    def _server_expired(self, sid: int) -> None:
        if sid == self._sid and self._reachable():
            self._wake.set()  # a connected client is told at once, as ZooKeeper does

    # --- faults: the hooks behind ha.testing.faults(driver), which documents them --------------

    def disconnect(self) -> None:
        """Drop the connection now (DISCONNECTED at once); the session ages until reconnect()."""
        self._cut = True
        self._lose_contact()

    def reconnect(self) -> None:
        self._cut = False
        self._wake.set()

    def partition(self) -> None:
        """Cut the client off silently: it notices only when its pings go unanswered."""
        self._partitioned = True

    def heal(self) -> None:
        self._partitioned = False
        self._wake.set()

    def freeze(self) -> None:
        """Every operation waits until ``thaw()`` (a stalled client or a slow server)."""
        if self._frozen is None:
            self._frozen = anyio.Event()

    def thaw(self) -> None:
        if self._frozen is not None:
            self._frozen.set()
            self._frozen = None

    def crash(self) -> None:
        """Die without a goodbye: no more contact; the server expires the session later."""
        self._crashed = True
        self._connected = False
        self._wake.set()

    def expire(self) -> None:
        """Have the server expire this client's session now."""
        if self._sid is not None:
            self.cluster.expire(self._sid)

    def fail_next(self, count: int = 1, *, transient: bool = True) -> None:
        """The next ``count`` operations fail: ConnectionLost, or AccessDenied if not transient."""
        for _ in range(count):
            self._fail.append(
                ConnectionLost("injected fault")
                if transient
                else AccessDenied("injected fatal fault")
            )

    # --- session ----------------------------------------------------------------------------

    @property
    def session_id(self) -> int | None:
        return self._sid

    @property
    def session_timeout(self) -> float:
        return self._timeout

    @property
    def last_contact(self) -> float:
        return self._last_contact

    @property
    def connected(self) -> bool:
        return self._connected

    # --- operations -------------------------------------------------------------------------

    async def _call(self, ops: Sequence[Op]) -> list[str | Stat | None]:
        if self.delay:
            await anyio.sleep(self.delay)
        while self._frozen is not None:
            await self._frozen.wait()
        await anyio.lowlevel.checkpoint()
        if self._pinger_task is None or self._sid is None:
            raise ConnectionLost("driver is not started")
        if self._fail:
            raise self._fail.pop(0)
        if not self._reachable() or not self._connected:
            raise ConnectionLost(f"memory cluster {self.cluster.name!r} unreachable")
        now = anyio.current_time()  # before the server's reading: never later than its view
        if not self.cluster.heartbeat(self._sid):
            self._learn_expired()
            raise SessionExpired(f"session {self._sid:#x} expired")
        self._contact(now)
        return self.cluster.apply(ops, self._sid)

    async def _one(self, op: Op) -> str | Stat | None:
        op = checked_op(op)
        try:
            return (await self._call([op]))[0]
        except TransactionFailed as exc:
            raise exc.cause from None

    async def create(
        self, path: str, data: bytes = b"", *, ephemeral: bool = False, makepath: bool = False
    ) -> str:
        validate_path(path)
        data = node_data(data)  # before any parent is made
        if makepath:
            parents: list[str] = []
            parent = parent_of(path)
            while parent != "/" and parent not in self.cluster.nodes:
                parents.append(parent)
                parent = parent_of(parent)
            for p in reversed(parents):
                try:
                    await self._one(Create(p))
                except NodeExists:
                    pass
        result = await self._one(Create(path, data, ephemeral))
        assert isinstance(result, str)
        return result

    async def get(self, path: str) -> tuple[bytes, Stat]:
        validate_path(path)
        await self._one(Check(path))
        node = self.cluster.nodes[path]
        return node.data, node.stat()

    async def exists(self, path: str) -> Stat | None:
        validate_path(path)
        try:
            await self._one(Check(path))
        except NoNode:
            return None
        return self.cluster.nodes[path].stat()

    async def set(self, path: str, data: bytes, version: int = -1) -> Stat:
        result = await self._one(SetData(path, data, version))
        assert isinstance(result, Stat)
        return result

    async def delete(self, path: str, version: int = -1, *, recursive: bool = False) -> None:
        validate_path(path)
        if path == "/":
            raise ConfigurationError("the root node cannot be deleted")
        if recursive:
            # all or nothing: check the version, then drop the whole subtree in one step
            await self._one(Check(path, version))
            self.cluster._remove(path)
            return
        await self._one(Delete(path, version))

    async def children(self, path: str) -> list[str]:
        validate_path(path)
        await self._one(Check(path))
        return sorted(self.cluster.nodes[path].children)

    async def transaction(self, ops: Sequence[Op]) -> list[str | Stat | None]:
        return await self._call([checked_op(op) for op in ops])
