"""The leaves a finished elector still owes, paid by one background task per driver.

An elector that quits leaves the queue before its run returns, and tries again for a while if
the backend does not answer (``Elector._release_after_quit``). Past that, its node may still be
in the queue: if its session lives on, nobody can lead behind it. It used to stop trying once
the driver had had no contact for a session timeout, taking the session for expired; but that
is only the earliest a backend may expire it (``ha/drivers/base.py``), not a promise that it
will. A backend that was down itself expires nothing meanwhile, and its sessions resume when
it is back (ZooKeeper after loading its snapshot, etcd's leases after a leader change, a
Kubernetes Lease its peers could not reap): the old node stood first in the queue, with its
session renewed, and the service had no leader (the supervised chaos round on Kubernetes, seed
5017: three supervisors queued behind one's own node from its quit, for good).

So what is still owed when the run returns goes to this task, which lives with the driver, not
with the run (a quit must not wait for a backend that is down: ``ha run`` exits on SIGTERM). It
tries each leave whenever its session is connected, backing off to a third of the session
timeout, and drops it once its session is over (a new session, or the driver closed): the
backend removes the node with the session then.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from weakref import WeakKeyDictionary, ref

import anyio

from .._background import BackgroundTask
from ..drivers.base import Driver

__all__ = ("Departures", "departures_of")

log = logging.getLogger("ha.elector")

Leave = Callable[[], Awaitable[bool]]  # one try: True once the node is gone


class Departures:
    """The leaves owed on one driver, each with its session: tried until paid or moot."""

    def __init__(self, driver: Driver) -> None:
        self._driver = ref(driver)  # weakly: ``_all`` maps the driver to this, weakly too
        self._owed: dict[object, tuple[int, str, Leave]] = {}  # key -> session, what, try
        self._task: BackgroundTask | None = None

    def owe(self, key: object, session: int, what: str, leave: Leave) -> None:
        """Keep trying ``leave`` while ``session`` is the driver's; ``key`` names the node."""
        self._owed[key] = (session, what, leave)
        if self._task is None:
            self._task = BackgroundTask(self._run, name="ha departures")
            self._task.start()

    async def _run(self) -> None:
        try:
            delay = 0.05
            while self._owed:
                driver = self._driver()
                if driver is None:
                    return
                for key, (session, what, leave) in list(self._owed.items()):
                    if driver.session_id != session:  # the session is over: so is its node
                        del self._owed[key]
                    elif driver.connected and await leave():
                        del self._owed[key]
                        log.info("%s: left the queue, owed since a quit", what)
                if not self._owed:
                    return
                await anyio.sleep(delay)
                delay = min(delay * 2, driver.session_timeout / 3)
        finally:
            self._task = None  # the next debt starts another task


_all: WeakKeyDictionary[Driver, Departures] = WeakKeyDictionary()


def departures_of(driver: Driver) -> Departures:
    """The leaves owed on ``driver`` (made at first use)."""
    found = _all.get(driver)
    if found is None:
        found = _all[driver] = Departures(driver)
    return found
