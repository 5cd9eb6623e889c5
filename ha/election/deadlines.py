"""The local deadlines of the terms running on one driver: one timer for them all.

Every term stops ``span`` (``deadline_ratio * session_timeout``) after the driver's last
contact (``leadership.py``). All the terms of one driver read the same ``last_contact``, so
they reach their deadlines together: one background task per driver sleeps until the nearest
one, and on waking either finds the contact renewed (and sleeps again) or stops the terms whose
deadline has passed. A timer per term woke every term at every renewal instead: ten thousand
actives on one driver cost ten thousand wake-ups per renewal interval, idle (a few percent of a
core on asyncio, more on trio, where each wake-up is a cancelled scope).

The task is a ``BackgroundTask`` (not in any elector's task group: it serves all of them) and
runs while terms are registered; it leaves once none is, and the next term starts another. It
never awaits between finding a term past its deadline and stopping it, and a term registered
already past its deadline is stopped at the task's next turn, as its own watchdog did.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from weakref import WeakKeyDictionary, ref

import anyio

from .._background import BackgroundTask
from ..drivers.base import Driver

__all__ = ("TermDeadlines", "deadlines_of")

log = logging.getLogger("ha.elector")

Expire = Callable[[float], None]  # told the time (loop clock) at which it was found expired


class TermDeadlines:
    """The running terms of one driver, each stopped ``span`` after the last contact."""

    def __init__(self, driver: Driver) -> None:
        self._driver = ref(driver)  # weakly: ``_all`` maps the driver to this, weakly too
        self._terms: dict[float, dict[object, Expire]] = {}  # span -> term -> its stop
        self._task: BackgroundTask | None = None
        self._changed: anyio.Event | None = None  # set: a term came, look again

    def add(self, term: object, span: float, expire: Expire) -> None:
        """Watch ``term``: ``expire(now)`` once ``now >= last_contact + span`` (then it is
        removed). Wakes the timer, which looks at once."""
        self._terms.setdefault(span, {})[term] = expire
        if self._task is None:
            self._changed = anyio.Event()
            self._task = BackgroundTask(self._run, name="ha term deadlines")
            self._task.start()
        elif self._changed is not None:
            self._changed.set()

    def remove(self, term: object, span: float) -> None:
        """Stop watching ``term`` (its term ended)."""
        terms = self._terms.get(span)
        if terms is not None:
            terms.pop(term, None)
            if not terms:
                del self._terms[span]
        if not self._terms and self._changed is not None:
            self._changed.set()  # the task leaves now, not at the deadline it sleeps until

    async def _run(self) -> None:
        driver = self._driver()
        try:
            while driver is not None:
                self._changed = anyio.Event()
                now, contact = anyio.current_time(), driver.last_contact
                for span in sorted(self._terms):
                    if now < contact + span:
                        break
                    for expire in self._terms.pop(span).values():
                        try:
                            expire(now)
                        except Exception:  # one term's stop must not keep the others running
                            log.exception("stopping a term on its deadline failed")
                if not self._terms:
                    return
                with anyio.move_on_after(contact + min(self._terms) - now):
                    await self._changed.wait()
        finally:
            self._task = self._changed = None  # the next term starts another task


_all: WeakKeyDictionary[Driver, TermDeadlines] = WeakKeyDictionary()


def deadlines_of(driver: Driver) -> TermDeadlines:
    """The deadlines of ``driver``'s terms (made at first use)."""
    found = _all.get(driver)
    if found is None:
        found = _all[driver] = TermDeadlines(driver)
    return found
