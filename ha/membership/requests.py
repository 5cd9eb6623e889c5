"""Failover requests at ``PATH/failover``: reading one, and the active taking it before it cedes.

The protocol is ``ha/admin/failover.py``'s (``ha failover``: an operator, or an active handing
the lead back, writes the request); the members' rules for it are ``rules.py``'s. Here is what
both sides share: the one reading of the node, and the active's mark on it.

Blocking and cancellation: each call is one backend round trip with no timeout of its own.
"""

from __future__ import annotations

import dataclasses

from ..drivers.base import Driver
from ..election.nodes import ElectionNodes
from ..errors import HAError, NoNode
from .records import FailoverRequest

__all__ = ("FailoverError", "read_failover", "read_request", "take_failover")


class FailoverError(HAError):
    """A graceful failover was refused or did not complete."""


async def read_request(driver: Driver, path: str) -> tuple[FailoverRequest | None, int | None]:
    """The request at ``PATH/failover`` (None: none, or unreadable bytes) and its node's
    version, to take it with (None: no node)."""
    try:
        raw, stat = await driver.get(ElectionNodes(path).failover)
    except NoNode:
        return None, None
    return FailoverRequest.decode(raw), stat.version


async def read_failover(driver: Driver, path: str) -> FailoverRequest | None:
    """The last request written at ``PATH/failover`` (pending or not), or None."""
    request, _ = await read_request(driver, path)
    return request


async def take_failover(driver: Driver, path: str, request: FailoverRequest, version: int) -> None:
    """The active takes ``request``, read at ``version``, before it cedes: marked ``ceding``,
    ``ha pause`` no longer clears it. Raises ``BadVersion`` or ``NoNode`` when it changed since
    (cleared by a pause, replaced by a newer request)."""
    taken = dataclasses.replace(request, ceding=True)
    await driver.set(ElectionNodes(path).failover, taken.encode(), version)
