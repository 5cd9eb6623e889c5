"""The etcd driver's requests: two gateways, the read and write batchers, and the fault gate.

Node operations go on one gateway, the lease's own requests (grant, keepalive, revoke) on
another: a keepalive never waits behind the node operations of a busy driver (1,000 electors
starting at once), whose queue could otherwise outlast the third of the timeout a keepalive
is given. Reads and write transactions of concurrent callers share etcd transactions
(``reads``, ``writes``); their senders run in the driver's background task (``run``).

Faults: ``gate`` is this transport's ``FaultGate``. Until a test arms it, ``call`` and
``operation`` are the plain functions below; arming swaps them for gated ones (``_armed``),
so a request of an untouched driver reads no fault flag.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import anyio

from ...errors import ConnectionLost, SessionExpired
from .._faults import FaultGate
from .gateway import Gateway
from .reads import ReadBatcher
from .settings import Settings
from .writes import WriteBatcher

__all__ = ("Transport",)

Call = Callable[..., Awaitable[dict[str, Any]]]


class Transport:
    """Requests to one etcd cluster. ``on_lost``: an operation lost contact (renew now)."""

    def __init__(self, settings: Settings, on_lost: Callable[[], None]) -> None:
        self.settings = settings
        self._on_lost = on_lost
        self._gateway = Gateway(settings)
        self._lease_gateway = Gateway(settings)  # grant, keepalive, revoke: never queued
        timeout = settings.op_timeout
        self.reads = ReadBatcher(lambda body: self.call("kv/txn", body), timeout)
        self._writes = WriteBatcher(lambda body: self.call("kv/txn", body), timeout)
        self.running = False  # between open and the start of aclose: requests may go
        self.gate = FaultGate("etcd", self._armed)
        # the request paths: gated ones once a test armed the gate
        self.call: Call = self._call
        self.operation: Call = self._operation
        self.coalesced: Callable[[list[dict[str, Any]]], Awaitable[Any]] = self._coalesced
        self.stream: Callable[..., AbstractAsyncContextManager[Any]] = self._gateway.stream

    def open(self) -> None:
        self._gateway.open()
        self._lease_gateway.open()
        self.running = True

    async def aclose(self) -> None:
        self.running = False
        await self._gateway.aclose()
        await self._lease_gateway.aclose()

    async def run(self) -> None:
        """The batchers' senders, until cancelled."""
        async with anyio.create_task_group() as tg:
            tg.start_soon(self.reads.run)
            await self._writes.run()

    def batching(self, on: bool) -> None:
        """Open the batchers to requests (their senders run in the task), or close them."""
        for batcher in (self.reads, self._writes):
            batcher.open() if on else batcher.close()

    async def revoke(self, lease: int) -> None:
        """Revoke ``lease`` on the lease's connection, whatever the client's faults (a close,
        or a test's expiry made on the server's side)."""
        await self._lease_gateway.call("lease/revoke", {"ID": str(lease)}, self.settings.op_timeout)

    # --- the request paths ------------------------------------------------------------------

    async def _call(
        self,
        method: str,
        body: dict[str, Any],
        within: float | None = None,
        *,
        lease: bool = False,
    ) -> dict[str, Any]:
        """One request to etcd (``lease``: one of the lease's own, on its connection)."""
        if not self.running:
            raise ConnectionLost("the etcd driver is not started (or closed)")
        gateway = self._lease_gateway if lease else self._gateway
        return await gateway.call(method, body, within or self.settings.op_timeout)

    async def _operation(self, method: str, body: dict[str, Any]) -> dict[str, Any]:
        """A request made for a node operation (not the session's own); its write
        transaction (one with compares) goes with those of other tasks (``writes``)."""
        try:
            if method == "kv/txn" and "compare" in body:
                return await self._writes.write(body)
            return await self.call(method, body)
        except (ConnectionLost, SessionExpired):
            self._on_lost()  # let the session loop find out what happened, now
            raise

    async def _coalesced(self, ranges: list[dict[str, Any]]) -> tuple[dict[str, Any], list[Any]]:
        """A read made for a node operation, coalesced with others (``reads``)."""
        try:
            return await self.reads.read(ranges)
        except (ConnectionLost, SessionExpired):
            self._on_lost()  # as _operation does
            raise

    async def ranges(
        self, requests: list[dict[str, Any]], revision: int = 0
    ) -> tuple[int, list[dict[str, Any]]]:
        """Several reads of a node operation at one revision (``revision``, or now): the
        revision and each read's reply. In transactions of at most 100 (etcd's default limit
        is 128 operations), with other tasks' reads made at the same time unless pinned to a
        revision (a compacted revision then fails only them)."""
        replies: list[dict[str, Any]] = []
        for first in range(0, len(requests), 100):
            batch = requests[first : first + 100]
            if revision:
                batch = [
                    {"request_range": {**r["request_range"], "revision": str(revision)}}
                    for r in batch
                ]
                reply = await self.operation("kv/txn", {"success": batch})
                header, responses = reply.get("header") or {}, reply.get("responses") or []
            else:
                header, responses = await self.coalesced(batch)
            revision = revision or int(header.get("revision") or 0)
            replies += [r.get("response_range") or {} for r in responses]
        return revision, replies

    # --- faults -----------------------------------------------------------------------------

    def _armed(self) -> None:
        """A test armed the gate: from now on requests pass through it."""
        gate, call, operation, coalesced = self.gate, self._call, self._operation, self._coalesced
        stream = self._gateway.stream

        async def gated_call(
            method: str, body: dict[str, Any], within: float | None = None, *, lease: bool = False
        ) -> dict[str, Any]:
            await gate.passage(within or self.settings.op_timeout)
            return await call(method, body, within, lease=lease)

        async def gated_operation(method: str, body: dict[str, Any]) -> dict[str, Any]:
            await gate.admit()
            return await operation(method, body)

        async def gated_coalesced(ranges: list[dict[str, Any]]) -> Any:
            await gate.admit()
            return await coalesced(ranges)

        @asynccontextmanager
        async def gated_stream(*args: Any, **kwargs: Any) -> AsyncIterator[Any]:
            gate.stream()
            async with stream(*args, **kwargs) as opened:
                yield opened

        self.call, self.operation, self.coalesced = gated_call, gated_operation, gated_coalesced
        self.stream = gated_stream
