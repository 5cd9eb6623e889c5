"""A preferred leader: the active hands the lead back to a standby of a higher priority.

As client-go's coordinated leader election and patronictl's candidate priority: after a failover
has put a less preferred host in the lead, the preferred one takes it back once it is healthy,
without an operator's ``ha failover --to``, and never by skipping fencing.

Publication. A contender's priority (``Elector(priority=N)``, ``ha run --priority N``; 0, the
default, means no preference) is part of its join: its ticket's nonce ends in ``p<N>``
(``ha/election/names.py``), so the node's name carries it. Every listing of the queue, the
active's and ``ha status``'s, shows it without reading anything more; it is fixed for the
node's life (a new priority is a new join).

Healthy. A contender counts as a candidate once the active has seen the same node of it in the
queue for ``settle`` seconds on its own clock (no clocks are compared between hosts). A host
that flaps (its health check fails, its session expires, it restarts) leaves the queue and
joins again with a new node, and its count starts again: a flapping preferred host causes no
failover storm. ``ha run`` adds what graceful failover already asks of a target: its member node
says it is a standby.

Handing back. ``Preference.look`` is pure (the h11 model): the queue as listed, our priority,
``now``; it returns the candidate to hand over to, if any: the highest priority above ours,
the first in the queue among equals, settled. The handover itself is graceful failover's
(``ha/admin/failover.py``): the active asks for a failover to that candidate, everyone ahead of
it in the queue steps aside, and the active cedes once it is next, stopping its work before its
node goes. A crashed preferred leader is fenced as any other, by whoever takes over; the hand
back only ever follows a graceful exit.

``HandBack`` is that I/O for ``ha run``: while its supervisor is active it lists the queue,
every ``POLL`` seconds or as soon as a contender settles, and hands the listing to
``Preference.look``. When that names a candidate, it asks for a graceful failover to it as an
operator's ``ha failover --to`` does (``request``: ``ha.admin.request_failover``, handed in, for
it reads the whole status, which ``ha/admin/`` above this package owns): every ``ha run`` of the
election honours the request the same way, so there is one handover, not two. A request still
pending (an operator's, or ours) is never overwritten: the next look asks again if need be. The
ceding active stays out for ``CEDE_COOLDOWN`` only: enough for the candidate to take over; it
then joins again behind it, with its lower priority, and stays a standby.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import anyio

from ..drivers.base import Driver
from ..election.lease import Lease
from ..election.names import QueueEntry
from ..election.nodes import ElectionNodes
from ..errors import ConfigurationError, HAError
from .records import text
from .requests import FailoverError, read_failover

__all__ = ("CEDE_COOLDOWN", "POLL", "HandBack", "Preference", "Preferred")

# how to ask for a failover: ``ha.admin.request_failover``'s signature
RequestFailover = Callable[..., Awaitable[object]]

log = logging.getLogger("ha.supervisor")

POLL = 1.0  # seconds between two looks at the queue while active (the queue wakes nobody)
CEDE_COOLDOWN = 1.0  # seconds the ceding active stays out (and waits for the queue to move)


@dataclass(frozen=True, slots=True)
class Preferred:
    """What a look at the queue found: the candidate to hand over to (None: nobody now), and
    when a look may find one because the clock alone made a contender settle."""

    target: QueueEntry | None
    wake_at: float = math.inf


class Preference:
    """The active's view of the queue for a preferred leader (clock-injected, no I/O).

    ``settle``: seconds a node must have been seen in the queue before its contender counts.
    """

    def __init__(self, settle: float) -> None:
        if not (math.isfinite(settle) and settle >= 0):
            raise ConfigurationError(f"the settle time must be >= 0 seconds, got {settle}")
        self.settle = settle
        self._seen: dict[str, float] = {}  # node name -> when we first saw it (our clock)

    def forget(self) -> None:
        """Not leading: what we saw no longer counts (a new term looks afresh)."""
        self._seen.clear()

    def look(
        self, now: float, entries: Sequence[QueueEntry], me: bytes, priority: int
    ) -> Preferred:
        """The queue as listed (leader first): the settled contender of the highest priority
        above ``priority`` (the first in the queue among equals), and when to look again."""
        self._seen = {e.name: self._seen.get(e.name, now) for e in entries}
        best: QueueEntry | None = None
        wake_at = math.inf
        for entry in entries:
            rank = entry.priority
            if entry.identity == me or rank <= priority:
                continue
            settled_at = self._seen[entry.name] + self.settle
            if now < settled_at:
                wake_at = min(wake_at, settled_at)
            elif best is None or rank > best.priority:
                best = entry
        return Preferred(best, wake_at)


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
        request: RequestFailover,
    ) -> None:
        self._driver = driver
        self._path = path
        self._nodes = ElectionNodes(path)
        self._identity = identity
        self._priority = priority
        self._lease = lease
        self._request = request
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
        who = f"{text(target.identity)!r} (priority {target.priority})"
        try:
            with anyio.fail_after(self._driver.session_timeout):
                pending = await read_failover(self._driver, self._path)
                if pending is not None and pending.epoch == lease.epoch:
                    return  # someone asked already: that request goes first
                await self._request(
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
