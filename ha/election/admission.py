"""Joins in flight in one process, bounded: a join waits for its turn before its op timeout runs.

A join is a few round trips (the node and breadcrumb transaction, the listing). A thousand
electors started at once on one driver, all joining at once, each wait behind all the others at
every step, so each join takes about as long as all of them together: past the op timeout, all
fail together, back off and join again together (a cascade that repeats while the process is
short of CPU). Here at most ``JOINS_IN_FLIGHT`` joins run at once; the others wait in this
process, before their op timeout starts, so the timeout bounds what the backend takes to answer
(as a Curator or client-go request timeout does), not the queue in front of it. Enough joins run
at once to fill the etcd driver's batches (``drivers/etcd/writes.py``).

The turns are the process's (its event loop's), not each driver's: what runs out is the
process's CPU. Ten drivers with a thousand electors each (leaders spread over sessions, so that
killing one session kills only its share) had ten times the joins in flight, and their joins
timed out together as a thousand did on one driver before (etcd, 10 x 100 electors: "join
failed: no answer in 4s" five times, fatal).

Only the wait for a turn is added: a join that has its turn runs and is bounded as before, so
no safety property moves (a join that lands late, even in a later session, is one the machine
already handles: ``machine.py``, P12). A quit asked while a join waits is handled after it.
"""

from __future__ import annotations

import anyio
from anyio.lowlevel import RunVar

from ..drivers.base import Driver

__all__ = ("JOINS_IN_FLIGHT", "join_turns")

JOINS_IN_FLIGHT = 128

_turns: RunVar[anyio.Semaphore] = RunVar("ha_join_turns")


def join_turns(driver: Driver) -> anyio.Semaphore:
    """The turns of the joins of this event loop, shared by every elector on every driver
    (made at first use); ``driver`` is the joining elector's, any of them."""
    try:
        return _turns.get()
    except LookupError:
        turns = anyio.Semaphore(JOINS_IN_FLIGHT)
        _turns.set(turns)
        return turns
