"""Where an elector's public transitions go, and what ``Elector.statistics()`` returns.

Each ``Report`` the machine makes becomes one ``Transition``: a log line on ``ha.elector`` (with
the fields as ``extra``), a journal line, a call of every listener and an item on every open
stream, and one more in the transition counts. A listener that raises is logged and kept; a
stream whose reader has gone is dropped.

Waiting for a state (``Elector.wait_active``, ``wait_state``) is woken here too: each waiter
looks at the state again after every transition and when the run ends. A waiter takes nothing
from anyone, so cancelling it at any point loses nothing.
"""

from __future__ import annotations

import functools
import logging
import math
import time
import typing
import weakref
from collections import Counter, deque
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from types import MappingProxyType, TracebackType

import anyio
import anyio.lowlevel
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from ..errors import ElectionFailed, ElectorStopped
from . import events as ev
from .journal import JournalWriter, Transition
from .machine import State

if typing.TYPE_CHECKING:
    from ..drivers.base import Driver

__all__ = ("ElectorStatistics", "FencingStatistics", "Reporting", "TransitionStream")

log = logging.getLogger("ha.elector")


@dataclass(frozen=True, slots=True)
class FencingStatistics:
    """Fences of one old active keep being refused (a takeover is blocked on them)."""

    old: str  # the old active's identity, as text ("an unreadable breadcrumb" if unknown)
    failures: int  # refusals in a row of that breadcrumb (the machine's count)
    error: str  # the last refusal
    next_try_in: float | None  # seconds until the next attempt; None if none is scheduled

    def note(self) -> str:
        """ "fencing 'x' failed 5 times, next try in 8s (error)"."""
        note = f"fencing {self.old!r} failed {self.failures} times"
        if self.next_try_in is not None:
            note += f", next try in {self.next_try_in:.0f}s"
        return f"{note} ({self.error})"


@dataclass(frozen=True, slots=True)
class ElectorStatistics:
    """What ``Elector.statistics()`` returns: one reading, never updated afterwards."""

    state: State  # the public state as last reported
    epoch: int | None  # the lease's epoch while ACTIVE
    transitions: Mapping[str, int]  # "neutral->active": how often each public change happened
    fencing: FencingStatistics | None = None  # set while fences are being refused
    holder: str | None = None  # the active as this elector knows it (itself, or its leader)
    paused: bool | None = None  # the election's pause as last read (None: being read again)
    active_since: float | None = None  # wall clock: this elector's term began (while ACTIVE)


@functools.cache
def _transition(old: State, new: State) -> tuple[str, str]:
    """The counts' key of a change: one tuple per change for the whole process, not one per
    elector (56 B each, and ten thousand electors count the same few)."""
    return (old.value, new.value)


class Reporting:
    """The transitions of the election at ``path`` as ``identity``, sent everywhere they go."""

    __slots__ = (
        "path", "identity", "journal", "counts", "followers", "driver",
        "_listeners", "_watchers", "_waiters", "_ended", "_vacant_since",
    )  # fmt: skip

    def __init__(self, path: str, identity: bytes, driver: Driver | None = None) -> None:
        self.path = path
        self.identity = identity
        self.driver = driver  # its session timeout and detection go into each transition
        self.journal: JournalWriter | None = None  # set by the elector for each run
        # when a predecessor that left its breadcrumb was found gone, until the next report
        self._vacant_since: float | None = None
        self.counts: Counter[tuple[str, str]] = Counter()
        # tuples, replaced on a change (rare): most electors have none, and () is shared
        self._listeners: tuple[Callable[[Transition], None], ...] = ()
        self._watchers: tuple[MemoryObjectSendStream[Transition], ...] = ()
        # the buffers of transitions()' async-for loops, held weakly: a loop left by break or
        # by an error goes away with its iterator (made for the first: ~700 B per elector)
        self.followers: weakref.WeakSet[_Follower] | None = None
        self._waiters: set[anyio.Event] | None = None  # made for the first waiter
        # why the run ended (None while it has not): (quit or cancelled, fatal error or None)
        self._ended: tuple[str, str | None] | None = None

    def transition_counts(self) -> Mapping[str, int]:
        """A read-only copy of the counts: ``{"neutral->active": n, ...}``."""
        return MappingProxyType({f"{a}->{b}": n for (a, b), n in sorted(self.counts.items())})

    def follow(self, follower: _Follower) -> None:
        if self.followers is None:
            self.followers = weakref.WeakSet()
        self.followers.add(follower)

    def add_listener(self, callback: Callable[[Transition], None]) -> None:
        self._listeners = (*self._listeners, callback)

    @asynccontextmanager
    async def stream(self) -> AsyncIterator[MemoryObjectReceiveStream[Transition]]:
        send, receive = anyio.create_memory_object_stream[Transition](math.inf)
        self._watchers = (*self._watchers, send)
        try:
            with receive:
                yield receive
        finally:
            self._drop_watcher(send)  # (gone already if send() found the reader closed)
            send.close()

    def _drop_watcher(self, send: MemoryObjectSendStream[Transition]) -> None:
        self._watchers = tuple(w for w in self._watchers if w is not send)

    def end(self, how: str, error: str | None) -> None:
        """The elector's run is over (``how``: "quit", "cancelled", "failed"); wake the waiters."""
        self._ended = (how, error)
        self._wake()

    async def wait_until(self, holds: Callable[[], bool], what: str) -> None:
        """Return once ``holds()``, judged now and after each transition. Raises
        ``ElectionFailed`` (run failed) or ``ElectorStopped`` (quit or cancelled) if the run
        has ended and ``holds()`` does not."""
        while not holds():
            if self._ended is not None:
                how, error = self._ended
                ident = self.identity.decode(errors="replace")
                message = f"election {self.path} as {ident!r} ended ({how}) before {what}"
                if error is not None:
                    raise ElectionFailed(f"{message}: {error}")
                raise ElectorStopped(message)
            event = anyio.Event()
            if self._waiters is None:
                self._waiters = set()
            waiters = self._waiters
            waiters.add(event)
            try:
                await event.wait()
            finally:
                waiters.discard(event)

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, None
        for event in waiters or ():
            event.set()

    def fencing(self) -> None:
        """The elector is about to fence an old active that left no record of leaving: the
        lock is free now. The next transition to active carries this time (the report dates
        the old active's end by it); any other transition forgets it."""
        if self._vacant_since is None:
            self._vacant_since = time.time()

    def send(self, report: ev.Report, *, until: float | None = None) -> None:
        """Log, journal, count and hand on one transition; ``until``: leaving active, when
        the term's local deadline had passed (wall clock), if it passed before now. The
        record is made only if something takes it (a handover's path: leaving, the report
        comes before the leave)."""
        vacant, self._vacant_since = self._vacant_since, None
        self.counts[_transition(report.old, report.new)] += 1
        logged = log.isEnabledFor(logging.INFO)
        taken = self.journal is not None or self._listeners or self._watchers or self.followers
        if logged or taken:
            self._hand_on(report, until, vacant, logged)
        self._wake()

    def _hand_on(
        self, report: ev.Report, until: float | None, vacant: float | None, logged: bool
    ) -> None:
        ident = self.identity.decode(errors="replace")
        driver = self.driver
        transition = Transition(
            time.time(),
            anyio.current_time(),
            self.path,
            ident,
            report.old,
            report.new,
            report.epoch,
            report.cause,
            session_timeout=None if driver is None else driver.session_timeout,
            detection=None if driver is None else driver.death_detection,
            vacant_since=vacant if report.new is State.ACTIVE else None,
            until=until,
        )
        if logged:
            log.info(
                "%s %s: %s -> %s (%s)",
                self.path,
                ident,
                report.old.value,
                report.new.value,
                report.cause,
                extra=transition.log_fields(),
            )
        if self.journal is not None:
            self.journal.write(transition)
        for listener in self._listeners:
            try:
                listener(transition)
            except Exception:
                log.exception("%s: transition listener raised", self.path)
        for watcher in self._watchers:
            try:
                watcher.send_nowait(transition)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                self._drop_watcher(watcher)
        for follower in list(self.followers or ()):
            follower.push(transition)


class TransitionStream:
    """What ``Elector.transitions()`` returns: every transition, in order, buffered until read.

    ``async for t in elector.transitions():`` receives from when the loop starts and never ends
    by itself (break, or cancel the task); its buffer is held weakly, so a loop left behind
    leaves nothing registered. ``async with elector.transitions() as stream:`` receives from
    entry until the block is left: ``stream`` is an anyio receive stream (``async for t in
    stream``, ``await stream.receive()``).
    """

    __slots__ = ("_reporting", "_entered")

    def __init__(self, reporting: Reporting) -> None:
        self._reporting = reporting
        self._entered: AbstractAsyncContextManager[MemoryObjectReceiveStream[Transition]] | None
        self._entered = None

    async def __aenter__(self) -> MemoryObjectReceiveStream[Transition]:
        if self._entered is not None:
            raise RuntimeError("this transitions() stream is already open; call it again")
        self._entered = self._reporting.stream()
        return await self._entered.__aenter__()

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        entered, self._entered = self._entered, None
        if entered is not None:
            await entered.__aexit__(kind, error, tb)

    def __aiter__(self) -> AsyncIterator[Transition]:
        follower = _Follower()
        self._reporting.follow(follower)
        return follower


class _Follower:
    """One ``async for`` over ``transitions()``: a buffer that ``Reporting.send`` fills."""

    __slots__ = ("_items", "_ready", "__weakref__")

    def __init__(self) -> None:
        self._items: deque[Transition] = deque()
        self._ready = anyio.Event()

    def push(self, transition: Transition) -> None:
        self._items.append(transition)
        self._ready.set()

    def __aiter__(self) -> _Follower:
        return self

    async def __anext__(self) -> Transition:
        if self._items:
            await anyio.lowlevel.checkpoint()  # a cancellation point on every item
        while not self._items:
            self._ready = anyio.Event()
            await self._ready.wait()
        return self._items.popleft()
