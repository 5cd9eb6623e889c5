"""Reads made at the same time by different tasks, sent to etcd as one transaction.

A read of the driver is a transaction of range requests (``session._ranges``). When many tasks
read at once (hundreds of electors starting on one driver), each one's transaction costs a
round trip and, above all, the client's CPU for one HTTP request. Reads have no effect on the
store, so the reads waiting when a sender is free go together in one transaction of at most
``LIMIT`` range requests, and each task gets its own replies and the transaction's revision:
every read of it is made at that one revision, as each was before. etcd allows 128 operations
per level of a transaction, so past ``CHUNK`` ranges they go in nested read-only transactions
(``request_txn``, etcd >= 3.3) of one: still one revision, and one request of the client's
instead of one per hundred ranges (etcd's own work is the same).

Senders are background tasks (``batching.WORKERS`` of them, so that a slow reply does not hold
up the reads behind it), taking the waiting reads earliest deadline first (``batching``); a
task that stops waiting (cancelled, timed out) before a sender took its read withdraws it
(under overload, reads nobody waits for would only lengthen the queue); one already taken is
sent and its answer dropped, which a read allows. A lost connection is every one's error; any
other error (etcd refusing one read, say a role that grants only part of the prefix) sends each
read again on its own, so it reaches only the readers it concerns. When no sender runs (the
driver starts or closes) the caller sends its read itself.

A range may carry its own revision (the watch's reads do): the transaction's revision is then
that of the others. etcd refuses a whole transaction with a compacted revision in it, so, as
for any refusal, each read is sent again alone and only the pinned one fails.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ...errors import ConnectionLost
from .batching import Batcher, Waiting, serve

__all__ = ("ReadBatcher",)

LIMIT = 800  # range requests in one transaction
CHUNK = 100  # range requests per level (etcd's default limit is 128 operations, nested ones
# counted against what their parent leaves: 8 nested transactions of 100 fit)

Send = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]
Reply = tuple[dict[str, Any], list[dict[str, Any]]]  # the header, a reply per range


@dataclass(eq=False)
class _Read(Waiting[Reply]):
    ranges: list[dict[str, Any]] = field(default_factory=list)
    settles: ClassVar[bool] = False  # a read has no effect: its caller need not wait for it


class ReadBatcher(Batcher[_Read]):
    """Range requests of concurrent readers, coalesced; ``run`` is its senders' loop.

    ``horizon``: the operation timeout, the latest deadline of a read (``batching.Queue``)."""

    def __init__(self, send: Send, horizon: float = math.inf) -> None:
        super().__init__(horizon)
        self._send = send  # one kv/txn request

    async def read(self, ranges: list[dict[str, Any]]) -> tuple[dict[str, Any], list[Any]]:
        """The transaction's header and the replies to ``ranges`` (at most ``LIMIT``)."""
        if not self.accepting:
            return await self._request(ranges)
        request = _Read(ranges=ranges)
        self.waiting.put(request)
        return await request.wait()

    async def _sender(self) -> None:
        waiting = self.waiting
        while True:
            await waiting.wait()
            batch: list[_Read] = []
            size = 0
            while (first := waiting.peek()) is not None:
                if batch and size + len(first.ranges) > LIMIT:
                    break  # the first of the next batch
                batch.append(waiting.pop())
                size += len(first.ranges)
            if batch:
                await self._serve(batch)
            del batch, first  # the replies are the readers': not held while idle

    async def _serve(self, batch: list[_Read]) -> None:
        await serve(batch, self._replies)

    async def _replies(self, batch: list[_Read]) -> list[Reply]:
        """Each read's share of one transaction of them all."""
        header, replies = await self._request([r for read in batch for r in read.ranges])
        shares, start = [], 0
        for read in batch:
            shares.append((header, replies[start : start + len(read.ranges)]))
            start += len(read.ranges)
        return shares

    async def _request(self, ranges: list[dict[str, Any]]) -> tuple[dict[str, Any], list[Any]]:
        """One transaction of ``ranges``: its header and the replies, in order."""
        if len(ranges) <= CHUNK:
            reply = await self._send({"success": ranges})
            return reply.get("header") or {}, list(reply.get("responses") or [])
        chunks = [ranges[at : at + CHUNK] for at in range(0, len(ranges), CHUNK)]
        reply = await self._send({"success": [{"request_txn": {"success": c}} for c in chunks]})
        nested = [r.get("response_txn") or {} for r in reply.get("responses") or []]
        replies = [one for txn in nested for one in txn.get("responses") or []]
        if len(replies) != len(ranges):
            raise ConnectionLost(f"etcd answered {len(ranges)} reads with {len(replies)}")
        return reply.get("header") or {}, replies
