"""Reads made at the same time by different tasks, sent to etcd as one transaction.

A read of the driver is a transaction of range requests (``session._ranges``). When many tasks
read at once (hundreds of electors starting on one driver), each one's transaction costs a
round trip and, above all, the client's CPU for one HTTP request. Reads have no effect on the
store, so the reads waiting when a sender is free go together in one transaction of at most
``LIMIT`` range requests, and each task gets its own replies and the transaction's revision:
every read of it is made at that one revision, as each was before.

Senders are background tasks (``WORKERS`` of them, so that a slow reply does not hold up the
reads behind it); a task that stops waiting (cancelled, timed out) before a sender took its
read withdraws it (under overload, reads nobody waits for would only lengthen the queue);
one already taken is sent and its answer dropped, which a read allows. A lost connection is every one's error; any other
error (etcd refusing one read, say a role that grants only part of the prefix) sends each read
again on its own, so it reaches only the readers it concerns. When no sender runs (the driver
starts or closes) the caller sends its read itself.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from ...errors import ConnectionLost

__all__ = ("ReadBatcher",)

LIMIT = 100  # range requests in one transaction (etcd's default limit is 128 operations)
WORKERS = 4  # transactions of reads in flight at once

Send = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


@dataclass
class _Read:
    ranges: list[dict[str, Any]]
    done: anyio.Event = field(default_factory=anyio.Event)
    reply: tuple[dict[str, Any], list[dict[str, Any]]] | None = None
    error: BaseException | None = None
    withdrawn: bool = False  # its reader stopped waiting before a sender took it


class ReadBatcher:
    """Range requests of concurrent readers, coalesced; ``run`` is its senders' loop."""

    def __init__(self, send: Send) -> None:
        self._send = send  # one kv/txn request
        self._inbox: MemoryObjectSendStream[_Read] | None = None

    async def read(self, ranges: list[dict[str, Any]]) -> tuple[dict[str, Any], list[Any]]:
        """The transaction's header and the replies to ``ranges`` (at most ``LIMIT``)."""
        request = _Read(ranges)
        try:
            if self._inbox is None:
                raise anyio.ClosedResourceError
            self._inbox.send_nowait(request)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            reply = await self._send({"success": ranges})
            return reply.get("header") or {}, list(reply.get("responses") or [])
        try:
            await request.done.wait()
        except BaseException:
            request.withdrawn = True  # skipped if still waiting; no effect once taken
            raise
        if request.error is not None:
            raise request.error
        assert request.reply is not None
        return request.reply

    async def run(self) -> None:
        """The senders, until cancelled; reads still waiting then fail as ConnectionLost."""
        inbox, outbox = anyio.create_memory_object_stream[_Read](math.inf)
        self._inbox = inbox
        try:
            async with anyio.create_task_group() as tg:
                for _ in range(WORKERS):
                    tg.start_soon(self._sender, outbox)
        finally:
            self._inbox = None
            inbox.close()
            for request in _drain(outbox):
                _fail(request, ConnectionLost("the etcd driver is closing"))
            outbox.close()

    async def _sender(self, outbox: MemoryObjectReceiveStream[_Read]) -> None:
        carried: _Read | None = (
            None  # the read that did not fit in the last batch: the next's first
        )
        try:
            while True:
                first = carried or await outbox.receive()
                carried = None
                if first.withdrawn:
                    continue
                batch, size = [first], len(first.ranges)
                while True:
                    try:
                        following = outbox.receive_nowait()
                    except anyio.WouldBlock:
                        break
                    if following.withdrawn:
                        continue
                    if size + len(following.ranges) > LIMIT:
                        carried = following
                        break
                    batch.append(following)
                    size += len(following.ranges)
                await self._serve(batch)
        except anyio.EndOfStream:
            return
        finally:
            if carried is not None:  # cancelled with it in hand: no other sender has it
                _fail(carried, ConnectionLost("the etcd driver is closing"))

    async def _serve(self, batch: list[_Read]) -> None:
        try:
            reply = await self._send({"success": [r for read in batch for r in read.ranges]})
        except ConnectionLost as exc:  # the request's fate, the same for every read in it
            for read in batch:
                _fail(read, exc)
            return
        except Exception as exc:
            if len(batch) == 1:
                _fail(batch[0], exc)
                return
            for read in batch:  # etcd refused one read (RBAC on its key?): each alone says
                await self._serve([read])
            return
        except BaseException:  # cancelled: the driver is closing
            for read in batch:
                _fail(read, ConnectionLost("the etcd driver is closing"))
            raise
        header, replies = reply.get("header") or {}, list(reply.get("responses") or [])
        start = 0
        for read in batch:
            read.reply = header, replies[start : start + len(read.ranges)]
            start += len(read.ranges)
            read.done.set()


def _fail(read: _Read, error: BaseException) -> None:
    read.error = error
    read.done.set()


def _drain(outbox: MemoryObjectReceiveStream[_Read]) -> list[_Read]:
    waiting = []
    while True:
        try:
            waiting.append(outbox.receive_nowait())
        except (anyio.WouldBlock, anyio.EndOfStream, anyio.ClosedResourceError):
            return waiting
