"""Where an elector's public transitions go, and what ``Elector.statistics()`` returns.

Each ``Report`` the machine makes becomes one ``Transition``: a log line on ``ha.elector`` (with
the fields as ``extra``), a journal line, a call of every listener and an item on every open
stream, and one more in the transition counts. A listener that raises is logged and kept; a
stream whose reader has gone is dropped.
"""

from __future__ import annotations

import logging
import math
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from types import MappingProxyType

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from . import events as ev
from .journal import JournalWriter, Transition
from .machine import State

__all__ = ("ElectorStatistics", "FencingStatistics", "Reporting")

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


class Reporting:
    """The transitions of the election at ``path`` as ``identity``, sent everywhere they go."""

    __slots__ = ("path", "identity", "journal", "counts", "_listeners", "_watchers")

    def __init__(self, path: str, identity: bytes) -> None:
        self.path = path
        self.identity = identity
        self.journal: JournalWriter | None = None  # set by the elector for each run
        self.counts: Counter[tuple[str, str]] = Counter()
        self._listeners: list[Callable[[Transition], None]] = []
        self._watchers: list[MemoryObjectSendStream[Transition]] = []

    def transition_counts(self) -> Mapping[str, int]:
        """A read-only copy of the counts: ``{"neutral->active": n, ...}``."""
        return MappingProxyType({f"{a}->{b}": n for (a, b), n in sorted(self.counts.items())})

    def add_listener(self, callback: Callable[[Transition], None]) -> None:
        self._listeners.append(callback)

    @asynccontextmanager
    async def stream(self) -> AsyncIterator[MemoryObjectReceiveStream[Transition]]:
        send, receive = anyio.create_memory_object_stream[Transition](math.inf)
        self._watchers.append(send)
        try:
            with receive:
                yield receive
        finally:
            if send in self._watchers:  # not if send() found the reader closed and dropped it
                self._watchers.remove(send)
            send.close()

    def send(self, report: ev.Report) -> None:
        """Log, journal, count and hand on one transition."""
        ident = self.identity.decode(errors="replace")
        transition = Transition(
            time.time(),
            anyio.current_time(),
            self.path,
            ident,
            report.old,
            report.new,
            report.epoch,
            report.cause,
        )
        self.counts[(report.old.value, report.new.value)] += 1
        log.info(
            "%s %s: %s -> %s (%s)",
            self.path,
            ident,
            report.old.value,
            report.new.value,
            report.cause,
            extra={
                "election": self.path,
                "identity": ident,
                "from_state": report.old.value,
                "to_state": report.new.value,
                "epoch": report.epoch,
                "cause": report.cause,
            },
        )
        if self.journal is not None:
            self.journal.write(transition)
        for listener in self._listeners:
            try:
                listener(transition)
            except Exception:
                log.exception("%s: transition listener raised", self.path)
        for watcher in list(self._watchers):
            try:
                watcher.send_nowait(transition)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                self._watchers.remove(watcher)
