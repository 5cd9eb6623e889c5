"""A driver's ``aclose`` when two callers close it at once.

``aclose`` promises the session over when it returns (its ephemeral nodes gone). A driver
closed by two owners at once (a service and the program around it, a signal's handler and the
main task) would see the second call find the close begun and return at once, while the first
was still revoking the lease or stopping its client. Wrapped with ``waits_for_a_close``, a
call made while another runs waits for that one instead. Calls one after the other each run
the body, which returns at once when there is nothing left to close (a driver closed before it
started may still be started and closed again).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import anyio

__all__ = ("waits_for_a_close",)

D = TypeVar("D")
_UNDER_WAY = "_ha_close_under_way"


def waits_for_a_close(
    aclose: Callable[[D], Coroutine[Any, Any, None]],
) -> Callable[[D], Coroutine[Any, Any, None]]:
    @functools.wraps(aclose)
    async def closing(self: D) -> None:
        under_way: anyio.Event | None = getattr(self, _UNDER_WAY, None)
        if under_way is not None:
            await under_way.wait()  # cancelled, this caller leaves; the first goes on
            return
        done = anyio.Event()
        setattr(self, _UNDER_WAY, done)
        try:
            await aclose(self)
        finally:
            setattr(self, _UNDER_WAY, None)
            done.set()

    return closing
