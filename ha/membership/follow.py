"""The two loops of a member of an election, beside its elector: its member node kept current,
and the failover requests read and handed to the rules (``rules.py``).

``ha run``'s supervisor and the services' membership (``ha/services/membership.py``) both run
them; each supplies what differs: the ``Member`` to publish, its lease's epoch, and how to do
what the rules decide.

The loops' reads (the request, the queue, the pause) and their one write (taking a request
before ceding) are best effort, each bounded by the session timeout: None when the backend
could not be read (an unread request must not look like history), the reason logged at debug.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import NoReturn

import anyio

from ..drivers.base import Driver
from ..election.nodes import ElectionNodes
from ..errors import DriverError, HAError
from .members import write_member
from .records import FailoverRequest, Member
from .requests import read_request, take_failover
from .rules import Decision, Eligibility

__all__ = ("Wakeup", "follow_failover", "keep_member")

log = logging.getLogger("ha.supervisor")  # as before the move: the lines are the same


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
    member: Callable[[], Member],
    wakeup: Wakeup,
    refresh: Callable[[], float] = lambda: math.inf,
) -> NoReturn:
    """Publish ``member()`` in our member node (latest value wins; best effort), again on each
    wakeup and after ``refresh()`` seconds."""
    while True:
        wakeup.arm()
        try:
            with anyio.fail_after(driver.session_timeout):
                await write_member(driver, path, member())
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
        request, version = await _read_request(driver, path)
        queue = await _read_queue(driver, path) if request else (None, ())
        # read after the request: a pause that cleared it, or that came before it, is seen
        paused = await _read_paused(driver, path) if request else False
        # unread: a pending request must not look like history, nor a paused election like
        # one that is not
        if queue is not None and paused is not None:
            now = anyio.current_time()
            decision = rules.failover_read(now, request, *queue, leading(), paused=paused)
            act(decision)
            if decision.take and request is not None:
                taken = await _take_request(driver, path, request, version)
                act(rules.taken(anyio.current_time(), request, taken))
        # the request's node wakes us, the queue's changes do not: while a request may still
        # ask something of us, read again soon; the timer also covers events lost while
        # disconnected
        await wakeup.wait(0.2 if rules.pending else 5.0)


async def _read_request(driver: Driver, path: str) -> tuple[FailoverRequest | None, int]:
    """The request (None: none, or unreadable) and its node's version (to take it with)."""
    try:
        with anyio.fail_after(driver.session_timeout):
            request, version = await read_request(driver, path)
            return request, -1 if version is None else version
    except (HAError, TimeoutError) as exc:
        log.debug("reading the failover request failed: %s", exc)
    return None, -1


async def _read_paused(driver: Driver, path: str) -> bool | None:
    """Whether the election is paused (``ha pause``); None when the backend could not say."""
    try:
        with anyio.fail_after(driver.session_timeout):
            return await driver.exists(ElectionNodes(path).pause) is not None
    except (HAError, TimeoutError) as exc:
        log.debug("reading the pause failed: %s", exc)
        return None


async def _take_request(driver: Driver, path: str, request: FailoverRequest, version: int) -> bool:
    """Take the request read at ``version`` (``requests.take_failover``): False when it
    changed since, or when the answer was lost (the next read tells)."""
    try:
        with anyio.fail_after(driver.session_timeout):
            await take_failover(driver, path, request, version)
            return True
    except (HAError, TimeoutError) as exc:
        log.info("failover request not taken: %s", exc or "no answer")
        return False


async def _read_queue(driver: Driver, path: str) -> tuple[int | None, tuple[bytes, ...]] | None:
    """The leader's epoch (None: nobody in the queue) and the identities in queue order,
    leader first; None when the backend could not be read."""
    nodes = ElectionNodes(path)
    try:
        with anyio.fail_after(driver.session_timeout):
            for _ in range(3):  # the leader may leave between the two reads
                entries = await nodes.entries(driver)
                if not entries:
                    return None, ()
                stat = await driver.exists(nodes.node(entries[0].name))
                if stat is not None:
                    return stat.created, tuple(e.identity for e in entries)
    except (HAError, TimeoutError) as exc:
        log.debug("reading the queue failed: %s", exc)
    return None
