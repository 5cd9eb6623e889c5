"""The supervisor's reads of the failover request and the queue, for ``eligibility.py``.

Best effort, each bounded by the session timeout: None when the backend could not be read (an
unread request must not look like history), the reason logged at debug.
"""

from __future__ import annotations

import logging

import anyio

from .. import admin
from ..drivers.base import Driver
from ..election.nodes import ElectionNodes
from ..errors import HAError

__all__ = ("read_failover", "read_queue")

log = logging.getLogger("ha.supervisor")


async def read_failover(driver: Driver, path: str) -> admin.FailoverRequest | None:
    try:
        with anyio.fail_after(driver.session_timeout):
            return await admin.read_failover(driver, path)
    except (HAError, TimeoutError) as exc:
        log.debug("reading the failover request failed: %s", exc)
        return None


async def read_queue(driver: Driver, path: str) -> tuple[int | None, tuple[bytes, ...]] | None:
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
