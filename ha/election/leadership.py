"""The leadership scope: the contender's ``become_active`` in a cancel scope, with a watchdog.

The elector starts one term at a time (``StartActive``) and stops it (``StopActive``); ``stop``
cancels the scope and then awaits the work, so nobody is told of any other state while it may
still run. A failure of ``become_active`` is reported to the machine as ``ActiveFailed``.
A ``become_active`` that returns has no work left to stop: its task ends, and the term (its
lease, its local deadline, the driver's note of it) lasts until ``stop``, which then has
nothing to cancel or wait for (a handover from such a leader costs no task switch, and an
idle leader holds no task).
Each term is also shown to the driver (``Driver.show_leader``/``hide_leader``: who leads, for
the backend's own tools such as ``kubectl get lease``); those calls only note it, never wait.

Timing assumption (see ``ha/drivers/base.py``): the backend expires a session no earlier than
``session_timeout`` after the last contact. The watchdog cancels the scope at
``driver.last_contact + deadline_ratio * session_timeout`` unless contact was made since, so
the work stops before leadership can pass on even if the elector's loop is stuck in a slow call;
it is one timer for all the terms of a driver (``deadlines.py``).
The lease's ``stop_deadline()`` is the same deadline, on ``time.monotonic()``.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from typing import Any

import anyio
import anyio.abc

from .._clock import monotonic_minus_loop
from ..drivers.base import Driver
from . import events as ev
from .deadlines import deadlines_of
from .lease import Lease
from .machine import Machine
from .nodes import ElectionNodes
from .timing import Timing

__all__ = ("Leadership",)

log = logging.getLogger("ha.elector")


class Leadership:
    """An elector's active work: at most one term runs at a time."""

    __slots__ = (
        "_driver",
        "_timing",
        "_nodes",
        "_identity",
        "_machine",
        "_feed",
        "_term",
        "_done",
        "_begun",
        "_returned",
        "expired",
    )

    def __init__(
        self,
        driver: Driver,
        timing: Timing,
        nodes: ElectionNodes,
        identity: bytes,
        machine: Machine,
        feed: Callable[[ev.Input], None],
    ) -> None:
        self._driver = driver
        self._timing = timing
        self._nodes = nodes
        self._identity = identity
        self._machine = machine  # read for its epoch: a lease is valid while it is ours
        self._feed = feed  # hands the machine an input (the watchdog's, a failure, a fence)
        self._term: _Term | None = None  # the term started last, until stopped
        self._done: anyio.Event | _Finished | None = None
        self._begun: anyio.Event | None = None  # set: the term's task is in become_active
        # the running term once its become_active has returned: the term ends in ``stop``
        # (its task has ended already)
        self._returned: _Term | None = None
        # the wall-clock time of the local deadline that stopped the last term (the journal
        # records it: a process frozen past it reports its term's end only when it thaws)
        self.expired: float | None = None

    def start(
        self,
        tg: anyio.abc.TaskGroup,
        contender: object,
        session: int,
        epoch: int,
        node: str,
    ) -> Lease:
        """Start ``become_active`` in a task of ``tg``; return the lease it is handed."""
        returned, self._returned = self._returned, None
        if returned is not None:  # (the machine stops a term before it starts the next)
            self._ended(returned)
        scope = anyio.CancelScope()
        done, begun = anyio.Event(), anyio.Event()
        self._done, self._begun = done, begun
        self.expired = None
        span = self._timing.deadline_ratio * self._driver.session_timeout
        term = self._term = _Term(self, scope, session, epoch, span)
        lease = term.lease = Lease(
            self._nodes.path,
            self._identity,
            epoch,
            session,
            self._nodes.node(node),
            term.valid,
            term.fenced,
            term.deadline,
        )
        # named here: anyio would otherwise work a name out of the function (on a handover's
        # path)
        tg.start_soon(self._lead, contender, term, scope, done, begun, name="ha term")
        self._driver.show_leader(self._nodes.path, self._identity, epoch)  # information only
        return lease

    async def begun(self) -> None:
        """Return once the term started last has entered ``become_active`` (or ended): the
        elector's writes for the others after a takeover wait for it, not the work for them.
        Yielding once did not do: trio runs the tasks ready together in a random order."""
        begun, self._begun = self._begun, None
        if begun is not None and not begun.is_set():
            await begun.wait()

    def cancel(self) -> None:
        """Begin to stop the running term, if any (``stop`` then waits for it): a quit asked
        for need not wait for the elector's loop to cancel the work. A term whose work has
        returned has nothing to cancel: its lease is invalid from here."""
        term = self._term
        if term is None:
            return
        if self._done is not None and self._done.is_set():
            self._term = None  # the lease's valid() reads it (no cancel: anyio's costs)
        else:
            term.stop()

    def session_ended(self, session: int) -> None:
        """The driver says ``session`` has ended (on the loop's thread, as it says so, before
        it opens the next one): the running term of that session has no deadline left and
        its work is cancelled now, not once the elector's loop gets to the expiry (by then
        the driver may have dated a newer session's contact)."""
        term = self._term
        if term is not None and term.session == session:
            term.ended = True
            term.stop()

    async def stop(self, cause: str) -> None:
        """Cancel the running term, if any, and wait until its work has returned."""
        term, done = self._term, self._done
        if done is None:
            return
        if not done.is_set():
            assert term is not None
            term.stop()
        while not done.is_set():
            with anyio.move_on_after(self._timing.hook_timeout):
                await done.wait()
            if not done.is_set():
                log.error(
                    "%s: the active work ignores cancellation; still waiting", self._nodes.path
                )
        self._term = self._done = self._begun = None
        returned, self._returned = self._returned, None
        if returned is not None:  # its task has ended; the term ends now
            self._ended(returned)
        log.debug("%s: active work stopped (%s)", self._nodes.path, cause)

    def _ended(self, term: _Term) -> None:
        deadlines_of(self._driver).remove(term, term.span)
        self._driver.hide_leader(self._nodes.path, term.epoch)

    async def _lead(
        self,
        contender: Any,
        term: _Term,
        scope: anyio.CancelScope,
        done: anyio.Event,
        begun: anyio.Event,
    ) -> None:
        lease = term.lease
        # the local deadline (property 3): one timer for all the driver's terms
        deadlines_of(self._driver).add(term, term.span, term.expire)
        returned = False
        try:
            with scope:
                began = anyio.current_time()
                try:
                    begun.set()  # the elector's loop goes on once this task next yields
                    await contender.become_active(lease)
                except BaseException as exc:
                    # a contender's own task group may raise a group mixing our
                    # cancellation with its errors: report the errors, re-raise the rest
                    cancelled, failed = _split_cancelled(exc)
                    if failed is not None:
                        log.error("%s: become_active raised", lease.election, exc_info=failed)
                        ran = anyio.current_time() - began
                        failure = ev.ActiveFailed(lease.session_id, lease.epoch, repr(failed), ran)
                        self._feed(failure)
                    if cancelled is not None:
                        raise cancelled from None
                    return
            # returned: keep leading until told to stop, with no task (``stop`` ends the term)
            returned = self._term is term
            if returned:
                self._returned = term
                term.scope = None  # nothing left to cancel (~600 B per idle leader)
        finally:
            if not returned:
                self._ended(term)
            begun.set()  # (ended before it began: nothing to wait for)
            done.set()
            # an idle leader keeps neither event (~900 B on asyncio): a finished term's are
            # read as set
            if self._done is done:
                self._done = FINISHED
            if self._begun is begun:
                self._begun = None


class _Term:
    """One term: what its lease asks (``valid``, ``fenced``, ``deadline``) and its stop on the
    local deadline (``expire``), as methods of one object. Four closures and their cells cost
    about 600 B more per idle leader."""

    __slots__ = (
        "_leadership", "scope", "session", "epoch", "span", "_to_monotonic", "lease", "stopped",
        "ended",
    )  # fmt: skip

    def __init__(
        self,
        leadership: Leadership,
        scope: anyio.CancelScope,
        session: int,
        epoch: int,
        span: float,
    ) -> None:
        self._leadership = leadership
        self.scope: anyio.CancelScope | None = scope  # the work's; None once it has returned
        self.stopped = False  # stop() was called: the lease is invalid
        self.ended = False  # the driver said the session ended: no contact is ours any more
        self.session = session
        self.epoch = epoch
        self.span = span  # the local deadline: this long after the driver's last contact
        # the lease is asked from any thread: its deadline is on time.monotonic()
        self._to_monotonic = monotonic_minus_loop()
        self.lease: Lease  # set once made (it holds these methods)

    def deadline(self) -> float:
        driver = self._leadership._driver
        # the contact first, the session after: a driver that opens its next session changes
        # its session id before it dates the new contact, so a reader on another thread that
        # sees the new contact sees the new session too
        contact = driver.last_contact
        if self.ended or driver.session_id != self.session:
            # the driver's contact is a newer session's (it may open one as soon as this one
            # expired, before the elector has handled the expiry, and a sqlite file made anew
            # numbers its sessions from 1 again): it says nothing of ours
            return -math.inf
        return contact + self.span + self._to_monotonic

    def valid(self) -> bool:
        leadership = self._leadership
        return (
            not self.stopped
            and leadership._term is self
            and leadership._machine.epoch == self.epoch
        )

    def stop(self) -> None:
        """Cancel the work (if it still runs); the lease is invalid from here."""
        self.stopped = True
        if self.scope is not None:
            self.scope.cancel()

    def fenced(self) -> None:
        if self.valid():
            self._leadership._feed(ev.Superseded(self.session, self.epoch))

    def expire(self, now: float) -> None:
        """Told by the driver's timer that ``now`` is past the local deadline (property 3)."""
        leadership = self._leadership
        contact = leadership._driver.last_contact
        log.warning(
            "%s: no contact with the backend for %.3fs: stopping the active work",
            self.lease.election,
            now - contact,
        )
        leadership.expired = time.time() - (now - (contact + self.span))
        self.stop()
        leadership._feed(ev.DeadlineExpired(self.session))


class _Finished:
    """The ``done`` of a term whose task has ended: set, as its event was."""

    __slots__ = ()

    def is_set(self) -> bool:
        return True

    async def wait(self) -> None:
        return None


FINISHED = _Finished()


def _split_cancelled(
    exc: BaseException,
) -> tuple[BaseException | None, Exception | None]:
    """Split what ``become_active`` raised into (cancellation to re-raise, failure to report).

    Anything that is neither cancellation nor an ``Exception`` (KeyboardInterrupt, SystemExit)
    is returned as "cancellation" so that it propagates.
    """
    cancelled_class = anyio.get_cancelled_exc_class()
    if isinstance(exc, BaseExceptionGroup):
        cancelled, rest = exc.split(cancelled_class)
        if rest is not None and not isinstance(rest, Exception):
            return exc, None  # a non-Exception inside: let it all propagate
        return cancelled, rest
    if isinstance(exc, Exception):
        return None, exc
    return exc, None
