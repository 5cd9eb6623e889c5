"""Joins in flight on one driver, bounded: a join waits for its turn before its op timeout runs.

A join is a few round trips (the node and breadcrumb transaction, the listing). A thousand
electors started at once on one driver, all joining at once, each wait behind all the others at
every step, so each join takes about as long as all of them together: past the op timeout, all
fail together, back off and join again together (a cascade that repeats while the process is
short of CPU). Here at most ``JOINS_IN_FLIGHT`` joins of one driver run at once; the others
wait in this process, before their op timeout starts, so the timeout bounds what the backend
takes to answer (as a Curator or client-go request timeout does), not the queue in front of it.
Enough joins run at once to fill the etcd driver's batches (``drivers/etcd/writes.py``).

Only the wait for a turn is added: a join that has its turn runs and is bounded as before, so
no safety property moves (a join that lands late, even in a later session, is one the machine
already handles: ``machine.py``, P12). A quit asked while a join waits is handled after it.
"""

from __future__ import annotations

from weakref import WeakKeyDictionary

import anyio

from ..drivers.base import Driver

__all__ = ("JOINS_IN_FLIGHT", "join_turns")

JOINS_IN_FLIGHT = 128

_turns: WeakKeyDictionary[Driver, anyio.Semaphore] = WeakKeyDictionary()


def join_turns(driver: Driver) -> anyio.Semaphore:
    """The turns of ``driver``'s joins, shared by every elector on it (made at first use)."""
    turns = _turns.get(driver)
    if turns is None:
        turns = _turns[driver] = anyio.Semaphore(JOINS_IN_FLIGHT)
    return turns
