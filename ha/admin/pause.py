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
"""

from __future__ import annotations

import getpass
import socket
import time

from ..drivers.base import Driver
from ..election.nodes import ElectionNodes
from ..errors import NodeExists, NoNode
from .records import Pause
from .status import check_election, election_status, read_node

__all__ = ("pause_election", "read_pause", "resume_election")


async def read_pause(driver: Driver, path: str) -> Pause | None:
    """The election's pause, or None when it is not paused."""
    got = await read_node(driver, ElectionNodes(path).pause)
    return None if got is None else Pause.decode(got[0])


async def pause_election(driver: Driver, path: str) -> tuple[Pause, bool]:
    """Pause the election at ``path``: (the pause, whether it was paused already).

    The election must exist (a pause of a typo would pause nothing anyone runs)."""
    check_election(path)
    status = await election_status(driver, path)
    if not status.exists:
        raise NoNode(f"no election at {path}")
    pause = Pause(_who(), time.time(), status.active, status.epoch if status.active else None)
    try:
        await driver.create(ElectionNodes(path).pause, pause.encode())
    except NodeExists:
        found = await read_pause(driver, path)
        return (found or pause), True
    return pause, False


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
