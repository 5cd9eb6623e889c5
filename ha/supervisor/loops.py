"""The two loops of a member of an election, beside its elector: its member node kept current,
and the failover requests read and handed to the rules (``eligibility.py``).

``ha run``'s supervisor and the services' membership (``ha/services/membership.py``) both run
them; each supplies what differs: the ``Member`` to publish, and what to do with a request.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import NoReturn

import anyio

from .. import admin
from ..drivers.base import Driver
from ..errors import DriverError, HAError
from .reads import read_failover, read_queue

__all__ = ("Wakeup", "follow_failover", "keep_member")

log = logging.getLogger("ha.supervisor")

# What a failover loop hands over: the request, the leader's epoch and the queue's identities.
Consider = Callable[[admin.FailoverRequest | None, int | None, tuple[bytes, ...]], None]


class Wakeup:
    """Wakes one loop. ``set()`` may come at any time (from callbacks); the loop ``arm()``s it
    before each read, so that a set during the read wakes the wait after it."""

    __slots__ = ("_event",)

    def __init__(self) -> None:
        self._event: anyio.Event | None = None  # made in the loop: anyio needs a running loop

    def set(self) -> None:
        if self._event is not None:
            self._event.set()

    def arm(self) -> None:
        self._event = anyio.Event()

    async def wait(self, seconds: float = math.inf) -> None:
        """Until set (since the last ``arm``), ``seconds`` at the most."""
        assert self._event is not None, "arm() first"
        with anyio.move_on_after(seconds):
            await self._event.wait()


async def keep_member(
    driver: Driver,
    path: str,
    member: Callable[[], admin.Member],
    wakeup: Wakeup,
    refresh: Callable[[], float] = lambda: math.inf,
) -> NoReturn:
    """Publish ``member()`` in our member node (latest value wins; best effort), again on each
    wakeup and after ``refresh()`` seconds."""
    while True:
        wakeup.arm()
        try:
            with anyio.fail_after(driver.session_timeout):
                await admin.write_member(driver, path, member())
        except (DriverError, HAError, TimeoutError) as exc:
            log.debug("member node not written: %s", exc)
        await wakeup.wait(refresh())


async def follow_failover(
    driver: Driver, path: str, wakeup: Wakeup, consider: Consider, pending: Callable[[], bool]
) -> NoReturn:
    """Read the failover request (and, if there is one, the queue) and ``consider`` it, again
    on each wakeup (the request's node changed, a new session)."""
    while True:
        wakeup.arm()
        request = await read_failover(driver, path)
        queue = await read_queue(driver, path) if request else (None, ())
        if queue is not None:  # unread: a pending request must not look like history
            consider(request, *queue)
        # the request's node wakes us, the queue's changes do not: while a request may still
        # ask something of us, read again soon; the timer also covers events lost while
        # disconnected
        await wakeup.wait(0.2 if pending() else 5.0)
