"""The memory backend's client: one session at a time on a ``MemoryCluster``.

``MemoryDriver`` pings its cluster every third of the session timeout and reports DISCONNECTED
after two thirds without an answer; while cut off, the node events the cluster pushes are held
and delivered on reconnection. Its faults (public methods, reached through
``ha.testing.faults``) act on this client only, as a network or a process fault would.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Self

import anyio
import anyio.lowlevel

from ..._background import BackgroundTask
from ...errors import (
    ConfigurationError,
    ConnectionLost,
    NodeExists,
    NoNode,
    SessionExpired,
    TransactionFailed,
)
from .._closing import waits_for_a_close
from .._faults import FaultGate, FaultHooks
from .._input import checked_op, node_data
from .._options import OptionTable
from ..base import (
    Capabilities,
    Check,
    ConnectionEvent,
    ConnectionState,
    Create,
    Delete,
    Driver,
    NodeEvent,
    Op,
    SessionKind,
    SessionLease,
    SetData,
    Stat,
    parent_of,
    validate_path,
)
from .cluster import MemoryCluster
from .faults import MemoryFaults

__all__ = ("MemoryDriver",)


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
        session_leases=True,
    )

    def __init__(self, cluster: str | MemoryCluster = "default", *, session_timeout: float = 2.0):
        super().__init__()
        if session_timeout <= 0:
            raise ConfigurationError(f"session_timeout must be positive, got {session_timeout}")
        self.cluster = (
            cluster if isinstance(cluster, MemoryCluster) else MemoryCluster.named(cluster)
        )
        self._session_timeout = float(session_timeout)
        self._pinger_task: BackgroundTask | None = None
        self._wake = anyio.Event()
        self._held: list[NodeEvent] = []
        # faults
        self._partitioned = False
        self._cut = False  # disconnected on purpose: no contact until reconnect()
        self._crashed = False
        # freeze() and fail_next(): part of what this simulated client models, read by _call
        self._injected = FaultGate("memory", arm=lambda: None)
        self.delay = 0.0

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
        self._pinger_task = BackgroundTask(
            self._pinger, name=f"memory pinger {self._session_id:#x}"
        )
        self._pinger_task.start()

    @waits_for_a_close
    async def aclose(self) -> None:
        if self._pinger_task is None:
            return
        task, self._pinger_task = self._pinger_task, None
        if self._session_id is not None and not self._crashed and self._reachable():
            self.cluster.close_session(self._session_id)
        self._session_id = None
        self._connected = False
        await task.stop()
        self._emit(ConnectionEvent(ConnectionState.CLOSED, None))

    def _open_session(self) -> None:
        now = anyio.current_time()  # before the server's reading: never later than its view
        self._session_id = self.cluster.open_session(self, self._session_timeout)
        self._connected = True
        self._last_contact = now
        self._emit(ConnectionEvent(ConnectionState.CONNECTED, self._session_id))

    # --- the client's heartbeat loop ---------------------------------------------------------

    async def _pinger(self) -> None:
        while True:
            wait = self._session_timeout / 3
            if self._connected and not self._reachable():
                # wake exactly when the read timeout runs out, to report DISCONNECTED on time
                lost_at = self._last_contact + self._session_timeout * 2 / 3
                wait = min(wait, max(0.0, lost_at - anyio.current_time()) + 0.001)
            with anyio.move_on_after(wait):
                await self._wake.wait()
            self._wake = anyio.Event()
            if self._crashed:
                return
            self._ping()

    def _ping(self) -> None:
        now = anyio.current_time()
        if self._session_id is None:
            return
        if self._reachable():
            if self.cluster.heartbeat(self._session_id):
                self._contact(now)
            else:
                self._learn_expired()
        elif self._connected and now - self._last_contact > self._session_timeout * 2 / 3:
            self._lose_contact()
        self.cluster.reap()

    def _reachable(self) -> bool:
        return not (self._partitioned or self._cut or self._crashed)

    def _contact(self, now: float) -> None:
        self._last_contact = now
        if not self._connected:
            self._connected = True
            self._emit(ConnectionEvent(ConnectionState.RECONNECTED, self._session_id))
        # held back by a cut shorter than the time to notice it (no DISCONNECTED came): they
        # arrive late, as a TCP connection's data does once the network heals
        held, self._held = self._held, []
        for event in held:
            self._emit(event)

    def _lose_contact(self) -> None:
        if self._connected:
            self._connected = False
            self._emit(ConnectionEvent(ConnectionState.DISCONNECTED, self._session_id))

    def _learn_expired(self) -> None:
        old = self._session_id
        self._held.clear()
        self._connected = False
        self._emit(ConnectionEvent(ConnectionState.EXPIRED, old))
        if self._pinger_task is not None and not self._crashed:
            self._open_session()

    def _watch_started(self, path: str) -> None:
        self.cluster.watch(path, self)

    def _watch_stopped(self, path: str) -> None:
        self.cluster.unwatch(path, self)

    # --- called by the cluster ---------------------------------------------------------------

    def server_event(self, event: NodeEvent) -> None:
        """The cluster pushes a node event of a path this client watches."""
        if self._crashed:
            return
        if self._connected and self._reachable():
            self._emit(event)
        else:
            self._held.append(event)

    def server_expired(self, sid: int) -> None:
        """The cluster ended session ``sid`` (its own, or one this client had before)."""
        if sid == self._session_id and self._reachable():
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
        self._injected.freeze()

    def thaw(self) -> None:
        self._injected.thaw()

    def crash(self) -> None:
        """Die without a goodbye: no more contact; the server expires the session later."""
        self._crashed = True
        self._connected = False
        self._wake.set()

    def expire(self) -> None:
        """Have the server expire this client's session now."""
        if self._session_id is not None:
            self.cluster.expire(self._session_id)

    def fail_next(self, count: int = 1, *, transient: bool = True) -> None:
        """The next ``count`` operations fail: ConnectionLost, or AccessDenied if not transient."""
        self._injected.fail_next(count, transient=transient)

    def _faults(self) -> FaultHooks:
        return MemoryFaults(self)

    # --- operations -------------------------------------------------------------------------

    async def _call(self, ops: Sequence[Op]) -> list[str | Stat | None]:
        if self.delay:
            await anyio.sleep(self.delay)
        await self._injected.thawed()
        await anyio.lowlevel.checkpoint()
        if self._pinger_task is None or self._session_id is None:
            raise ConnectionLost("driver is not started")
        self._injected.raise_queued()
        if not self._reachable() or not self._connected:
            raise ConnectionLost(f"memory cluster {self.cluster.name!r} unreachable")
        now = anyio.current_time()  # before the server's reading: never later than its view
        if not self.cluster.heartbeat(self._session_id):
            self._learn_expired()
            raise SessionExpired(f"session {self._session_id:#x} expired")
        self._contact(now)
        return self.cluster.apply(ops, self._session_id)

    async def _one(self, op: Op) -> str | Stat | None:
        op = checked_op(op)
        try:
            return (await self._call([op]))[0]
        except TransactionFailed as exc:
            raise exc.cause from None

    async def create(
        self,
        path: str,
        data: bytes = b"",
        *,
        ephemeral: bool = False,
        sequential: bool = False,
        makepath: bool = False,
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
        result = await self._one(Create(path, data, ephemeral, sequential))
        assert isinstance(result, str)
        return result

    async def session_lease(self, owner: int) -> SessionLease | None:
        await self._call([])  # as a read: fails while cut off
        return self.cluster.lease(owner)

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
            self.cluster.remove(path)
            return
        await self._one(Delete(path, version))

    async def children(self, path: str) -> list[str]:
        validate_path(path)
        await self._one(Check(path))
        return sorted(self.cluster.nodes[path].children)

    async def transaction(self, ops: Sequence[Op]) -> list[str | Stat | None]:
        return await self._call([checked_op(op) for op in ops])
