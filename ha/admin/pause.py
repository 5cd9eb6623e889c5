"""Maintenance mode (``ha pause`` / ``ha resume``), as Patroni's pause.

    PATH/pause     persistent, ``ha.pause/1`` JSON: who paused, when, and the active then

While the node is there, no contender takes the lead: one first in the queue waits without
fencing or acting (``ha/election/machine.py``, P16). ``ha run`` on the active leaves its
COMMAND alone (no cede on a failing health check, no restart or cede when it exits:
``ha/supervisor/paused.py``) until the resume.
The active keeps leading while it holds its node: a pause never makes a second active. If the
active goes during a pause, nobody leads until ``ha resume`` (``ha status`` says so).

A contender learns of a pause from the node's event (and from every read of the queue), so a
takeover already under way when the node is written may still complete: the pause holds once
its write is seen, which ``ha pause`` cannot wait for on every contender.

No graceful failover while paused (Patroni runs no scheduled switchover while paused either):
the target could not take the lead (P16), so the active would cede to nobody. So:

- ``ha pause`` clears a pending failover request (``failover.py``) in the transaction that
  writes the pause node, and says so; a request that is not pending is checked unchanged in
  the same transaction, so one written meanwhile is read again and cleared too.
- Once the active has taken a request (marked it ``ceding``, version-checked, before it stops
  COMMAND) it is handing over: ``ha pause`` refuses until its node is gone (the request is
  history then). The mark and the clearing both need the version read, so exactly one of
  them lands.
- ``ha failover`` refuses while paused, and ``ha run`` never cedes while the pause is read
  (``ha/membership/rules.py``): it reads the pause after the request, so a request
  written after a pause (``ha failover`` racing it) is dropped. Not covered: a first request
  ever (no node yet) created while a pause is being written, read by the active just before
  the pause lands, and taken just after.
"""

from __future__ import annotations

import getpass
import socket
import time
from typing import NamedTuple

from ..drivers.base import Check, Create, Delete, Driver, Op
from ..election.nodes import ElectionNodes
from ..errors import HAError, NodeExists, NoNode, TransactionFailed
from ..membership.records import FailoverRequest, Pause, text
from ..membership.requests import read_request
from .status import check_election, election_status, read_node

__all__ = ("PauseRefused", "Paused", "pause_election", "read_pause", "resume_election")

_TRIES = 5  # reads and transactions, while the failover request changes in between


class PauseRefused(HAError):
    """The election cannot be paused now (the active is handing the lead over)."""


class Paused(NamedTuple):
    """What ``pause_election`` did."""

    pause: Pause  # the pause in force: ours, or the one found
    already: bool  # it was paused already
    cleared: FailoverRequest | None  # the pending failover request it cleared


async def read_pause(driver: Driver, path: str) -> Pause | None:
    """The election's pause, or None when it is not paused."""
    got = await read_node(driver, ElectionNodes(path).pause)
    return None if got is None else Pause.decode(got[0])


async def pause_election(driver: Driver, path: str) -> Paused:
    """Pause the election at ``path``, clearing a pending failover request in the same
    transaction (see the module docstring).

    The election must exist (a pause of a typo would pause nothing anyone runs). Raises
    ``PauseRefused`` while the active is ceding to a request it took."""
    check_election(path)
    nodes = ElectionNodes(path)
    for _ in range(_TRIES):
        request, version = await read_request(driver, path)
        status = await election_status(driver, path)
        if not status.exists:
            raise NoNode(f"no election at {path}")
        if status.paused is not None:
            return Paused(status.paused, True, None)
        pending = request if request is not None and request.epoch == status.epoch else None
        if pending is not None and pending.ceding:
            to = "any standby" if pending.to is None else repr(text(pending.to))
            raise PauseRefused(
                f"{text(pending.active)!r} is handing the lead to {to} now (`ha failover` asked"
                f" by {pending.by or '?'}): pause once the new active leads"
            )
        pause = Pause(_who(), time.time(), status.active, status.epoch if status.active else None)
        ops: list[Op] = [Create(nodes.pause, pause.encode())]
        if version is not None:
            # cleared if pending, else checked unchanged: one written meanwhile is read again
            ops.append((Check if pending is None else Delete)(nodes.failover, version))
        try:
            await driver.transaction(ops)
        except TransactionFailed as exc:
            if exc.index == 0 and isinstance(exc.cause, NodeExists):
                found = await read_pause(driver, path)
                return Paused(found or pause, True, None)
            continue  # the failover request changed since read: read again
        return Paused(pause, False, pending)
    raise PauseRefused(f"the failover request of {path} kept changing: try again")


async def resume_election(driver: Driver, path: str) -> Pause | None:
    """End the pause: the pause that was (None: it was not paused)."""
    check_election(path)
    found = await read_pause(driver, path)
    try:
        await driver.delete(ElectionNodes(path).pause)
    except NoNode:
        return None
    return found


def _who() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "?"
    return f"{user}@{socket.gethostname()}"
