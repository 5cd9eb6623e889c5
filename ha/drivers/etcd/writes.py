"""Write transactions made at the same time by different tasks, sent to etcd as one.

Hundreds of electors starting at once on one driver each write several transactions (the
election's folders, the join); each one alone costs a round trip, a raft entry and, above all,
the client's CPU for one HTTP request. The writes waiting when a sender is free go together as
*nested* transactions (``request_txn``, etcd >= 3.3) in the success branch of one transaction
without compares, and each caller gets the reply its own transaction would have had.

Why each caller's outcome is the one it would have had alone:

1. etcd evaluates every compare of every nested transaction against the store as it was before
   the outer one (``compareToPath``, before any write), then applies the branches chosen, in
   order, at one revision, all at once. Each nested transaction has its own compares and its own
   success and failure branches: a compare that fails only picks its caller's failure branch
   (its ``succeeded`` false); the outer one, without compares, always takes its success branch.
2. Two callers go together only if neither writes (put, range delete) a key that the other
   compares, reads or writes (``Footprint``). So no caller's compares or reads can see another
   caller's writes, and the merged transaction has the effect of the callers alone one after
   the other, in any order (they commute). Without that rule, two callers each comparing the key
   the other writes would both succeed, which no order of them alone allows (a write skew: two
   leaders). It also keeps etcd's rule that a key is written at most once per transaction.
3. etcd refuses a whole transaction before applying anything for some errors (too many
   operations or bytes, a put's lease not found, a key the user's role may not write): then each
   caller's transaction is sent again alone, so the error reaches only the callers it concerns.
   A lost connection leaves the outcome unknown for every caller alike, as it would have been
   for each alone: each gets ``ConnectionLost``, and nothing is sent again (``batching``).
4. Creation numbers: nodes created by callers merged in one transaction share its revision
   (``Stat.created``). Those calls were in flight together, with no order between them; and
   sequential creates under one parent all write the parent's counter key, so they never go
   together: the tokens of an election's queue stay distinct and in the order of the joins.
5. A caller that stops waiting (cancelled, timed out) before a sender took its transaction
   withdraws it: it is never sent. Once taken, it is in flight, as a request of its own would be.

Budget: etcd counts a transaction's operations per level, and a nested transaction may have at
most ``--max-txn-ops`` (128 by default) less its parent's operations, so a batch of ``k``
callers holds only transactions of at most ``128 - k`` compares (or ops) each (``MAX_OPS``;
a caller's own nested transactions count as etcd counts them).
Waiting writes are taken earliest deadline first (``batching``). When no sender runs (the
driver starts or closes) the caller sends its transaction itself; so does a caller that finds
nothing waiting and nothing in flight (one at a time: those that come meanwhile wait, to go
together), shielded as a taken request's caller is. A quiet driver's write (a leader's leave)
then costs no switch of tasks.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.lowlevel

from ...errors import ConnectionLost
from .batching import Batcher, Waiting, serve
from .keys import unb64

__all__ = ("Footprint", "WriteBatcher", "footprint")

LIMIT = 32  # callers' transactions in one etcd transaction
MAX_OPS = 128  # etcd's default --max-txn-ops (a batch of k leaves 128 - k to each caller's)
MAX_BYTES = 256 * 1024  # about, in one request (etcd's default --max-request-bytes: 1.5 MiB)
SCAN = 4 * LIMIT  # waiting transactions looked at for one batch (conflicting ones wait)

Send = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]
Span = tuple[bytes, bytes | None]  # a key range [start, end); end None: to the last key


@dataclass(slots=True)
class Footprint:
    """The keys a transaction reads (compares, range requests) and writes (puts, deletes):
    single keys in sorted lists, ranges apart (few: children listings, a subtree's levels)."""

    read_keys: list[bytes] = field(default_factory=list)
    read_spans: list[Span] = field(default_factory=list)
    write_keys: list[bytes] = field(default_factory=list)
    write_spans: list[Span] = field(default_factory=list)
    ops: int = 0  # of its parent's budget (etcd's count: its largest list, nested ones added)
    size: int = 0  # about, in bytes

    def conflicts(self, other: Footprint) -> bool:
        """Whether either writes what the other reads or writes."""
        return (
            _meets(self.write_keys, self.write_spans, other.read_keys, other.read_spans)
            or _meets(self.write_keys, self.write_spans, other.write_keys, other.write_spans)
            or _meets(other.write_keys, other.write_spans, self.read_keys, self.read_spans)
        )

    def add(self, other: Footprint) -> None:
        for key in other.read_keys:
            bisect.insort(self.read_keys, key)
        for key in other.write_keys:
            bisect.insort(self.write_keys, key)
        self.read_spans += other.read_spans
        self.write_spans += other.write_spans
        self.ops = max(self.ops, other.ops)
        self.size += other.size


def footprint(body: dict[str, Any]) -> Footprint | None:
    """What the transaction ``body`` touches, at any depth of nesting; None if it cannot go
    with others (a request this module does not know)."""
    found = Footprint()
    need = _walk(body, found)
    if need is None:
        return None
    found.ops = need
    found.read_keys.sort()
    found.write_keys.sort()
    return found


def _walk(body: dict[str, Any], found: Footprint) -> int | None:
    """Note the keys of ``body`` in ``found``; the operations it needs from its parent's
    budget (its own largest list, plus what its nested transactions need), None: unknown."""
    if set(body) - {"compare", "success", "failure"}:
        return None
    compares = body.get("compare") or []
    success, failure = body.get("success") or [], body.get("failure") or []
    for rule in compares:
        _note(found.read_keys, found.read_spans, rule)
        found.size += 64
    inner = 0
    for op in (*success, *failure):
        if len(op) != 1:
            return None
        ((kind, request),) = op.items()
        if kind == "request_range":
            _note(found.read_keys, found.read_spans, request)
        elif kind in ("request_put", "request_delete_range"):
            _note(found.write_keys, found.write_spans, request)
        elif kind == "request_txn":
            need = _walk(request, found)
            if need is None:
                return None
            inner = max(inner, need)
        else:
            return None
        found.size += 64 + len(request.get("value") or "")
    return max(len(compares), len(success), len(failure)) + inner


def _note(keys: list[bytes], spans: list[Span], request: dict[str, Any]) -> None:
    key = unb64(request.get("key"))
    end = unb64(request.get("range_end"))
    if not end:
        keys.append(key)
    else:
        spans.append((key, None if end == b"\x00" else end))


def _meets(keys: list[bytes], spans: list[Span], keys2: list[bytes], spans2: list[Span]) -> bool:
    """Whether one side's keys and ranges share a key with the other's (key lists sorted)."""
    shorter, longer = (keys, keys2) if len(keys) <= len(keys2) else (keys2, keys)
    for key in shorter:
        at = bisect.bisect_left(longer, key)
        if at < len(longer) and longer[at] == key:
            return True
    return _spans_meet(spans, keys2, spans2) or _spans_meet(spans2, keys, [])


def _spans_meet(spans: list[Span], keys: list[bytes], spans2: list[Span]) -> bool:
    """Whether a range of ``spans`` holds one of ``keys`` or overlaps one of ``spans2``."""
    for start, end in spans:
        at = bisect.bisect_left(keys, start)
        if at < len(keys) and (end is None or keys[at] < end):
            return True
        for start2, end2 in spans2:
            if (end2 is None or start < end2) and (end is None or start2 < end):
                return True
    return False


@dataclass(eq=False)
class _Write(Waiting[dict[str, Any]]):
    body: dict[str, Any] = field(default_factory=dict)
    footprint: Footprint = field(default_factory=Footprint)


class WriteBatcher(Batcher[_Write]):
    """Write transactions of concurrent callers, merged; ``run`` is its senders' loop.

    ``horizon``: the operation timeout, the latest deadline of a write (``batching.Queue``)."""

    def __init__(self, send: Send, horizon: float = math.inf) -> None:
        super().__init__(horizon)
        self._send = send  # one kv/txn request

    async def write(self, body: dict[str, Any]) -> dict[str, Any]:
        """The reply to the transaction ``body``, as if it had been sent alone."""
        if not self.accepting:
            return await self._send(body)
        if not self.busy and not self.waiting:
            # nothing to merge it with, no batch in flight: sent by its caller, sparing the
            # switch to a sender and back (a handover's leave), and the reading of its keys;
            # settled as a taken request is
            self.busy += 1
            try:
                with anyio.CancelScope(shield=True):
                    reply = await self._send(body)
            finally:
                self.busy -= 1
            await anyio.lowlevel.checkpoint_if_cancelled()  # as a taken request's caller
            return reply
        found = footprint(body)
        if found is None:  # cannot go with others
            return await self._send(body)
        request = _Write(body=body, footprint=found)
        self.waiting.put(request)
        return await request.wait()

    async def _sender(self) -> None:
        while True:
            await self.waiting.wait()
            batch = self._take()
            if batch:
                self.busy += 1
                try:
                    await serve(batch, self._replies)
                finally:
                    self.busy -= 1
            del batch  # the replies are the writers': not held while idle

    def _take(self) -> list[_Write]:
        """The first waiting write and those after it that can go with it (``Footprint``,
        ``MAX_OPS``, ``MAX_BYTES``); the others keep their place, the withdrawn are dropped.
        Empty if every waiting write was withdrawn."""
        pending = self.waiting
        if pending.peek() is None:
            return []
        first = pending.pop()
        batch, seen, kept = [first], Footprint(), []
        seen.add(first.footprint)
        for _ in range(min(SCAN, len(pending))):
            if len(batch) == LIMIT:
                break
            write = pending.pop()
            if write.withdrawn:
                continue
            fits = len(batch) + 1 + max(seen.ops, write.footprint.ops) <= MAX_OPS
            fits = fits and seen.size + write.footprint.size <= MAX_BYTES
            if fits and not seen.conflicts(write.footprint):
                batch.append(write)
                seen.add(write.footprint)
            else:
                kept.append(write)
        for write in kept:
            pending.put_back(write)
        return batch

    async def _replies(self, batch: list[_Write]) -> list[dict[str, Any]]:
        if len(batch) == 1:
            return [await self._send(batch[0].body)]
        body = {"success": [{"request_txn": write.body} for write in batch]}
        return _split(await self._send(body), len(batch))


def _split(reply: dict[str, Any], count: int) -> list[dict[str, Any]]:
    """Each nested transaction's reply, with the outer one's header (its revision)."""
    header = reply.get("header") or {}
    nested = [r.get("response_txn") for r in reply.get("responses") or []]
    if len(nested) != count or any(not isinstance(r, dict) for r in nested):
        raise ConnectionLost(f"etcd answered {count} transactions in one with {reply!r:.200}")
    return [{**r, "header": header} for r in nested if isinstance(r, dict)]
