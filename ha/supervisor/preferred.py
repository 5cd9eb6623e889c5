"""``ha run --priority``: the active hands the lead back to a preferred standby.

The rules are ``ha/election/preference.py``'s (who is preferred, when a contender counts as
healthy); this is their I/O. While this supervisor is active it lists the queue, every ``POLL``
seconds or as soon as a contender settles, and hands the listing to ``Preference.look``. When
that names a candidate, it asks for a graceful failover to it with ``request_failover``, as an
operator's ``ha failover --to`` does: every ``ha run`` of the election honours the request the
same way (``ha/admin/failover.py``), so there is one handover, not two. A request still pending
(an operator's, or ours) is never overwritten: the next look asks again if need be.

The ceding active stays out for ``CEDE_COOLDOWN`` only: enough for the candidate to take over;
it then joins again behind it, with its lower priority, and stays a standby.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import anyio

from ..admin import FailoverError, read_failover, request_failover, text
from ..drivers.base import Driver
from ..election.lease import Lease
from ..election.nodes import ElectionNodes, QueueEntry
from ..election.preference import Preference, priority_of
from ..errors import HAError

__all__ = ("CEDE_COOLDOWN", "POLL", "HandBack")

log = logging.getLogger("ha.supervisor")

POLL = 1.0  # seconds between two looks at the queue while active (the queue wakes nobody)
CEDE_COOLDOWN = 1.0  # seconds the ceding active stays out (and waits for the queue to move)


class HandBack:
    """Hands the lead to a preferred contender while ``lease()`` says we are active."""

    def __init__(
        self,
        driver: Driver,
        path: str,
        identity: bytes,
        priority: int,
        settle: float,
        lease: Callable[[], Lease | None],
    ) -> None:
        self._driver = driver
        self._path = path
        self._nodes = ElectionNodes(path)
        self._identity = identity
        self._priority = priority
        self._lease = lease
        self._preference = Preference(settle)
        self._said = ""  # the last line logged about a candidate: said once, not every look

    async def run(self) -> None:
        """Look at the queue while active; never returns (cancel it)."""
        while True:
            lease = self._lease()
            if lease is None:
                self._preference.forget()
                self._said = ""
                await anyio.sleep(POLL)
                continue
            await anyio.sleep(await self._look(lease))

    async def _look(self, lease: Lease) -> float:
        """One look; how long to wait before the next."""
        try:
            with anyio.fail_after(self._driver.session_timeout):
                entries = await self._nodes.entries(self._driver)
        except (HAError, TimeoutError) as exc:
            log.debug("reading the queue for a preferred leader failed: %s", exc)
            return POLL
        now = anyio.current_time()
        found = self._preference.look(now, entries, self._identity, self._priority)
        if found.target is None or entries[0].identity != self._identity:
            return max(0.01, min(POLL, found.wake_at - now))
        await self._ask(found.target, lease)
        return POLL

    async def _ask(self, target: QueueEntry, lease: Lease) -> None:
        who = f"{text(target.identity)!r} (priority {priority_of(target.ticket)})"
        try:
            with anyio.fail_after(self._driver.session_timeout):
                pending = await read_failover(self._driver, self._path)
                if pending is not None and pending.epoch == lease.epoch:
                    return  # someone asked already: that request goes first
                await request_failover(
                    self._driver,
                    self._path,
                    target.identity,
                    cooldown=CEDE_COOLDOWN,
                    by=f"the preferred leader {who}",
                )
            self._say(logging.INFO, f"{who} is preferred and healthy: handing the lead to it")
        except FailoverError as exc:  # e.g. it is no `ha run` supervisor, or not a standby
            self._say(logging.INFO, f"not handing the lead to {who}: {exc}")
        except (HAError, TimeoutError) as exc:
            log.debug("asking for a failover to %s failed: %s", who, exc or "no answer")

    def _say(self, level: int, line: str) -> None:
        if line != self._said:
            self._said = line
            log.log(level, "%s", line)
