"""The supervisor's reads of the failover request, the queue and the pause, for
``eligibility.py``, and its one write there: taking a request before it cedes.

Best effort, each bounded by the session timeout: None when the backend could not be read (an
unread request must not look like history), the reason logged at debug.
"""

from __future__ import annotations

import logging

import anyio

from .. import admin
from ..drivers.base import Driver
from ..election.nodes import ElectionNodes
from ..errors import HAError, NoNode

__all__ = ("read_failover", "read_paused", "read_queue", "take_failover")

log = logging.getLogger("ha.supervisor")


async def read_failover(driver: Driver, path: str) -> tuple[admin.FailoverRequest | None, int]:
    """The request (None: none, or unreadable) and its node's version (to take it with)."""
    try:
        with anyio.fail_after(driver.session_timeout):
            raw, stat = await driver.get(ElectionNodes(path).failover)
            return admin.FailoverRequest.decode(raw), stat.version
    except NoNode:
        pass
    except (HAError, TimeoutError) as exc:
        log.debug("reading the failover request failed: %s", exc)
    return None, -1


async def read_paused(driver: Driver, path: str) -> bool | None:
    """Whether the election is paused (``ha pause``); None when the backend could not say."""
    try:
        with anyio.fail_after(driver.session_timeout):
            return await driver.exists(ElectionNodes(path).pause) is not None
    except (HAError, TimeoutError) as exc:
        log.debug("reading the pause failed: %s", exc)
        return None


async def take_failover(
    driver: Driver, path: str, request: admin.FailoverRequest, version: int
) -> bool:
    """Take the request read at ``version`` (``admin.take_failover``): False when it changed
    since, or when the answer was lost (the next read tells)."""
    try:
        with anyio.fail_after(driver.session_timeout):
            await admin.take_failover(driver, path, request, version)
            return True
    except (HAError, TimeoutError) as exc:
        log.info("failover request not taken: %s", exc or "no answer")
        return False


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
