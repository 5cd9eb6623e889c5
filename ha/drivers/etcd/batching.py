"""What the driver's two batchers (``reads``, ``writes``) share: a caller's waiting request and
how a batch of them is answered.

A batch is sent as one etcd request. A lost connection is every caller's error (the outcome
is unknown for each alike, as it would have been alone); any other error is etcd refusing the
whole request before applying anything, so each request is sent again on its own and the
error reaches only the callers it concerns; a cancelled sender (the driver closing) fails them
all. A caller that stops waiting before a sender took its request withdraws it.

A writer that stops waiting after a sender took its request still waits, shielded, for that
request's end (bounded: every request has the operation timeout) before it goes: a write must
not land after its caller gave up and moved on. An elector whose join timed out looks for the
node it may have created and deletes it; had the join's write still been queued behind others,
it would land after that look, a node of ours ahead of our next one for the whole session.
Readers go at once (a read has no effect).

Order: the waiting requests are taken earliest deadline first (``Queue``): a request's
deadline is its caller's (the cancel scopes around it: an elector's op timeout), or the
operation timeout from now if that is sooner. In arrival order, a thousand electors starting at
once each wait behind all the others at every step of their join, so all joins end near the
time all of them take together: past the op timeout, all time out at once and start again.
Earliest deadline first serves the oldest operations first, so that under overload those that
can still make their deadline do, and the others give up with their requests unsent. Requests
in flight together have no order between them, so none is owed arrival order.

A batcher takes requests from ``open`` (the driver's start) to ``close``: those made before its
senders run wait for them (a driver's first requests, made at once, would otherwise each go
alone: a thousand electors started with the driver sent a thousand reads).
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, TypeVar

import anyio

from ...errors import ConnectionLost

__all__ = ("Queue", "Waiting", "closing", "serve")

T = TypeVar("T")


def closing() -> ConnectionLost:
    return ConnectionLost("the etcd driver is closing")


@dataclass(eq=False)  # found by identity
class Waiting(Generic[T]):
    """One caller's request, until a sender answers it."""

    done: anyio.Event = field(default_factory=anyio.Event)
    reply: T | None = None
    error: BaseException | None = None
    withdrawn: bool = False  # its caller stopped waiting: skipped unless already taken
    taken: bool = False  # a sender is sending it
    order: tuple[float, int] = (math.inf, 0)  # its deadline, then its arrival (``Queue``)
    settles: ClassVar[bool] = True  # a caller leaving waits for its taken request's end

    async def wait(self) -> T:
        """The reply, or the error; a cancelled caller withdraws its request, or if it is
        taken already (and ``settles``) waits for its end first."""
        try:
            await self.done.wait()
        except BaseException:
            self.withdrawn = True
            if self.taken and self.settles:
                with anyio.CancelScope(shield=True):
                    await self.done.wait()
            raise
        if self.error is not None:
            raise self.error
        assert self.reply is not None
        return self.reply

    def answer(self, reply: T) -> None:
        self.reply = reply
        self.done.set()

    def fail(self, error: BaseException) -> None:
        self.error = error
        self.done.set()


W = TypeVar("W", bound=Waiting[Any])

WORKERS = 4  # senders of a batcher: batches in flight at once, so a slow reply holds up none


class Queue(Generic[W]):
    """Waiting requests, earliest deadline first, then in arrival order (the module says why).

    ``horizon``: a request's deadline is at most this far from its arrival."""

    def __init__(self, horizon: float = math.inf) -> None:
        self.horizon = horizon
        self._heap: list[tuple[float, int, W]] = []
        self._arrivals = itertools.count()
        self._arrived: anyio.Event | None = None  # set when a request comes (made in a loop)

    def __len__(self) -> int:
        return len(self._heap)

    def put(self, request: W) -> None:
        due = min(anyio.current_effective_deadline(), anyio.current_time() + self.horizon)
        request.order = (due, next(self._arrivals))
        self.put_back(request)
        if self._arrived is not None:
            self._arrived.set()

    def put_back(self, request: W) -> None:
        """A request taken and not sent, in its place again."""
        heapq.heappush(self._heap, (*request.order, request))

    def peek(self) -> W | None:
        """The first request still waited for (the withdrawn are dropped), left in place."""
        while self._heap and self._heap[0][2].withdrawn:
            heapq.heappop(self._heap)
        return self._heap[0][2] if self._heap else None

    def pop(self) -> W:
        """The first request, withdrawn or not (the caller skips the withdrawn)."""
        return heapq.heappop(self._heap)[2]

    async def wait(self) -> None:
        """Return once a request waits (at once if one does)."""
        while not self._heap:
            if self._arrived is None or self._arrived.is_set():
                self._arrived = anyio.Event()
            await self._arrived.wait()

    def drain(self) -> list[W]:
        """Every request still waiting, taken out."""
        waiting, self._heap = [item[2] for item in sorted(self._heap)], []
        return waiting


class Batcher(Generic[W]):
    """The waiting requests (``Queue``) and their ``WORKERS`` senders, taking requests from
    ``open`` to ``close`` (the module says why); a subclass's ``_sender`` takes and sends."""

    def __init__(self, horizon: float = math.inf) -> None:
        self.waiting: Queue[W] = Queue(horizon)
        self.accepting = False  # taking requests (the senders may not run yet)
        self.busy = 0  # batches being sent (and requests sent by their callers)

    def open(self) -> None:
        """Take requests from now on: they wait for the senders (``run``) if these are not
        running yet (a driver's first requests would otherwise each go alone)."""
        self.accepting = True

    def close(self) -> None:
        """Take no more requests (callers then send their own); those waiting fail as
        ConnectionLost."""
        self.accepting = False
        for request in self.waiting.drain():
            request.fail(closing())

    async def run(self) -> None:
        """The senders, until cancelled; requests still waiting then fail (``close``)."""
        self.open()
        try:
            async with anyio.create_task_group() as tg:
                for _ in range(WORKERS):
                    tg.start_soon(self._sender)
        finally:
            self.close()

    async def _sender(self) -> None:
        raise NotImplementedError


async def serve(batch: list[W], send: Callable[[list[W]], Awaitable[Sequence[Any]]]) -> None:
    """Answer ``batch`` with ``send(batch)`` (a reply per request, in order), as the module
    says for errors."""
    for request in batch:
        request.taken = True
    try:
        replies = await send(batch)
    except ConnectionLost as exc:
        for request in batch:
            request.fail(exc)
        return
    except Exception as exc:
        if len(batch) == 1:
            batch[0].fail(exc)
            return
        for request in batch:  # refused as a whole: each alone says which one it concerns
            await serve([request], send)
        return
    except BaseException:  # cancelled: the driver is closing
        for request in batch:
            request.fail(closing())
        raise
    for request, reply in zip(batch, replies, strict=True):
        request.answer(reply)
