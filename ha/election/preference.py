"""A preferred leader: contenders with a priority, and when the active hands the lead back.

As client-go's coordinated leader election and patronictl's candidate priority: after a failover
has put a less preferred host in the lead, the preferred one takes it back once it is healthy,
without an operator's ``ha failover --to``, and never by skipping fencing.

Publication. A contender's priority (``Elector(priority=N)``, ``ha run --priority N``; 0, the
default, means no preference) is part of its join: its ticket's nonce ends in ``p<N>``
(``nonce``), so the node's name carries it. Every listing of the queue, the active's and
``ha status``'s, shows it without reading anything more; it is fixed for the node's life (a
new priority is a new join).

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
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import ConfigurationError
from .nodes import QueueEntry

__all__ = (
    "MAX_PRIORITY",
    "Preference",
    "Preferred",
    "check_priority",
    "nonce",
    "priority_of",
)

MAX_PRIORITY = 1_000_000
_NONCE = re.compile(r"[0-9a-f]{8}p(\d{1,7})")  # a nonce that publishes a priority


def check_priority(priority: object) -> int:
    """``priority`` if it is an integer in [0, MAX_PRIORITY], else raise ConfigurationError."""
    if type(priority) is not int or not 0 <= priority <= MAX_PRIORITY:
        raise ConfigurationError(
            f"priority must be an integer from 0 (no preference) to {MAX_PRIORITY}, got"
            f" {priority!r}"
        )
    return priority


def nonce(bits: int, priority: int) -> str:
    """A join's nonce: 8 hex digits of ``bits``, then ``p<priority>`` unless it is 0."""
    base = f"{bits:08x}"
    return base if priority == 0 else f"{base}p{priority}"


def priority_of(ticket: str) -> int:
    """The priority a join's ticket publishes (``QueueEntry.ticket``); 0 when it names none."""
    found = _NONCE.fullmatch(ticket.rpartition("_")[2])
    return 0 if found is None else min(int(found.group(1)), MAX_PRIORITY)


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
            rank = priority_of(entry.ticket)
            if entry.identity == me or rank <= priority:
                continue
            settled_at = self._seen[entry.name] + self.settle
            if now < settled_at:
                wake_at = min(wake_at, settled_at)
            elif best is None or rank > priority_of(best.ticket):
                best = entry
        return Preferred(best, wake_at)
