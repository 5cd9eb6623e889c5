"""The two loops of a member of an election, beside its elector: its member node kept current,
and the failover requests read and handed to the rules (``eligibility.py``).

``ha run``'s supervisor and the services' membership (``ha/services/membership.py``) both run
them; each supplies what differs: the ``Member`` to publish, its lease's epoch, and how to do
what the rules decide.
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
from .eligibility import Decision, Eligibility
from .reads import read_failover, read_paused, read_queue, take_failover

__all__ = ("Wakeup", "follow_failover", "keep_member")

log = logging.getLogger("ha.supervisor")


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
    driver: Driver,
    path: str,
    wakeup: Wakeup,
    rules: Eligibility,
    leading: Callable[[], int | None],
    act: Callable[[Decision], None],
) -> NoReturn:
    """Read the failover request (and, if there is one, the queue and the pause), hand them
    to ``rules`` with ``leading()`` (our lease's epoch, None when not active) and ``act`` on
    the decision, again on each wakeup (the request's node changed, a new session). A cede is
    acted on only once the request is taken."""
    while True:
        wakeup.arm()
        request, version = await read_failover(driver, path)
        queue = await read_queue(driver, path) if request else (None, ())
        # read after the request: a pause that cleared it, or that came before it, is seen
        paused = await read_paused(driver, path) if request else False
        # unread: a pending request must not look like history, nor a paused election like
        # one that is not
        if queue is not None and paused is not None:
            now = anyio.current_time()
            decision = rules.failover_read(now, request, *queue, leading(), paused=paused)
            act(decision)
            if decision.take and request is not None:
                taken = await take_failover(driver, path, request, version)
                act(rules.taken(anyio.current_time(), request, taken))
        # the request's node wakes us, the queue's changes do not: while a request may still
        # ask something of us, read again soon; the timer also covers events lost while
        # disconnected
        await wakeup.wait(0.2 if rules.pending else 5.0)
