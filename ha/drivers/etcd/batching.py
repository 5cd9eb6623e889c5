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
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, TypeVar

import anyio

from ...errors import ConnectionLost

__all__ = ("Waiting", "closing", "serve")

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
