"""The etcd driver: ``etcd://h1:2379,h2:2379/prefix?session_timeout=5``, through etcd's gateway.

A facade over the parts it owns: the requests (``transport``, with the fault gate), the
session (``session``: one lease, renewed), the node events (``watches``) and the node
operations (``operations``, which plan with ``mapping``). It starts and closes them, in order.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Self

import anyio

from ..._background import BackgroundTask
from ...errors import DriverError
from .._closing import waits_for_a_close
from .._faults import ClientFaults, FaultHooks
from .._input import checked_op, node_data
from .._parts import PartsDriver, SessionState
from ..base import (
    Capabilities,
    ConnectionEvent,
    ConnectionState,
    Create,
    Op,
    SessionKind,
    SessionLease,
    Stat,
)
from .keys import KeySpace
from .operations import Operations
from .session import EtcdSession
from .settings import Settings, parse_url
from .transport import Transport
from .watches import Watches

__all__ = ("EtcdDriver",)

log = logging.getLogger("ha.drivers.etcd")


class EtcdDriver(PartsDriver):
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
        super().__init__()
        self.settings = settings = Settings.check(hosts, prefix, **options)
        self.space = KeySpace(settings.prefix)
        self._transport = Transport(settings, on_lost=self._wake)
        self._watches = Watches(self.space, self._transport, self._pass_on)
        self._session = EtcdSession(settings, self._transport, self._pass_on, self._watches.restart)
        self._ops = Operations(self.space, self._transport, self._session, self._long_way)
        self._task: BackgroundTask | None = None
        self._closing = False
        self._crashed = False  # a test's crash: the process is gone, nothing is said or undone

    @classmethod
    def from_url(cls, url: str, **options: Any) -> Self:
        """``etcd://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...][/PREFIX][?OPTION=VALUE&...]``.

        Options (also as keywords, which win over the URL): session_timeout, connect_timeout,
        op_timeout (seconds); user, password; TLS: tls (https), ca, cert, key.
        """
        netloc, prefix, values = parse_url(url, options)
        return cls(netloc, prefix=prefix, **values)

    # --- lifecycle --------------------------------------------------------------------------

    async def start(self) -> None:
        if self._task is not None or self._closing:
            raise RuntimeError("driver already started")
        self._transport.open()
        self._task = BackgroundTask(self._run, name=f"etcd session at {self.settings.where}")
        try:
            await self._session.open()
        except BaseException:
            self._task = None
            await self._transport.aclose()
            raise
        self._task.start()
        self._transport.batching(True)  # before the task runs: the first requests wait for it
        self._emit(ConnectionEvent(ConnectionState.CONNECTED, self._session.lease))

    @waits_for_a_close
    async def aclose(self) -> None:
        task, self._task = self._task, None
        if task is None:
            return
        self._closing = True
        # a close under cancellation still clears up (each step is bounded: the watch's end
        # by a second, the revoke by op_timeout): the lease and its nodes go at once
        with anyio.CancelScope(shield=True):
            self._transport.running = False
            await self._watches.quiesce()
            await task.stop()
            self._transport.batching(False)
            lease = self._session.state.close()
            if lease and not self._crashed:
                try:  # its ephemeral nodes go with it, at once
                    await self._transport.revoke(lease)
                except DriverError as exc:
                    log.warning("could not revoke the etcd lease %x: %s", lease, exc)
            await self._transport.aclose()
        self._watches.closed()
        if lease and not self._crashed:
            self._emit(ConnectionEvent(ConnectionState.CLOSED, None))

    async def _run(self) -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._transport.run)
            tg.start_soon(self._watches.run, self._session.start_revision)
            await self._session.state.run()

    def _wake(self) -> None:
        self._session.state.wake()

    # --- the session, as the parts keep it --------------------------------------------------

    def _session_state(self) -> SessionState:
        return self._session.state

    async def session_lease(self, owner: int) -> SessionLease | None:
        return await self._session.lease_of(owner)

    def _watch_started(self, path: str) -> None:
        self._watches.started(path)

    def _watch_stopped(self, path: str) -> None:
        self._watches.stopped(path)

    # --- nodes ------------------------------------------------------------------------------

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
        return await self._ops.create(op, makepath)

    async def get(self, path: str) -> tuple[bytes, Stat]:
        return await self._ops.get(path)

    async def exists(self, path: str) -> Stat | None:
        return await self._ops.exists(path)

    async def set(self, path: str, data: bytes, version: int = -1) -> Stat:
        return await self._ops.set(path, data, version)

    async def delete(self, path: str, version: int = -1, *, recursive: bool = False) -> None:
        await self._ops.delete(path, version, recursive=recursive)

    async def children(self, path: str) -> list[str]:
        return await self._ops.children(path)

    async def transaction(self, ops: Sequence[Op]) -> list[str | Stat | None]:
        return await self._ops.transaction(ops)

    async def ensure_path(self, path: str) -> None:
        await self._ops.ensure_paths([path])

    async def ensure_paths(self, paths: Sequence[str]) -> None:
        await self._ops.ensure_paths(paths)

    async def _long_way(self, path: str) -> None:
        """``Driver.ensure_path``: a create with makepath (this driver's, as a caller's)."""
        await super().ensure_path(path)

    # --- test faults (ha.testing.faults) ----------------------------------------------------

    def _faults(self) -> FaultHooks:
        return ClientFaults(
            self.capabilities.name,
            self._transport.gate,
            self._session.state,
            started=lambda: self._task is not None,
            restart_watch=self._watches.restart,
            stop=self._die,
            expire=self._end_session,
        )

    async def _die(self) -> None:
        """A test's crash: the background tasks stop; nothing is undone at close."""
        assert self._task is not None
        self._crashed = True
        await self._watches.quiesce()
        await self._task.stop()

    async def _end_session(self) -> None:
        """etcd revokes the session's lease now (its ephemeral nodes go at once); the driver
        learns it from its next keepalive (EXPIRED, then CONNECTED with a new lease), which
        is sent at once."""
        lease = self._session.lease
        if not lease or self._task is None:
            raise RuntimeError("the etcd driver has no session to expire")
        await self._transport.revoke(lease)
        self._session.state.wake()
