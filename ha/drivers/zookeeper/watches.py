"""Node events from ZooKeeper's one-shot watches, re-armed after each firing.

Watches: one-shot ``exists`` watches, re-armed after every firing and after every reconnect
(kazoo 2.11 has no persistent watches). Each arming reads the node's stat; the difference from
the last stat seen becomes the events (created, changed, deleted, or deleted then created for a
node replaced in between, or created then deleted for a node that came and went between the
firing and the read), so nothing that changed while the watch was down goes unreported,
only coalesced (as ZooKeeper's own watches are). A deletion is reported as soon as it fires.

Events keep ZooKeeper's order across paths: the server sends them in the order of its updates,
and a subscriber may act on that order (a standby that hears of a pause before its leader's
exit must not take the lead). A firing whose events wait for their read holds back every event
after it until that read is back (a round trip, and only when something changed just before).
"""

from __future__ import annotations

import functools
import logging
from collections import deque
from collections.abc import Callable
from typing import Any

from kazoo import exceptions as kx
from kazoo.protocol.states import EventType

from ..base import DriverEvent, NodeEvent, NodeEventKind
from .handler import inline
from .session import KazooSession

__all__ = ("Watches",)

log = logging.getLogger("ha.drivers.zookeeper")


class _Watch:
    """The re-armed watch of one subscribed path."""

    __slots__ = ("path", "active", "arming", "again", "armed", "last", "fired")

    def __init__(self, path: str) -> None:
        self.path = path
        self.active = True  # False once the last subscriber left
        self.arming = False  # an exists request is in flight
        self.again = False  # re-arm once the in-flight one returns
        self.armed = False  # a watch is set on the server
        # what is known of the node: _UNKNOWN before the first arming (which only records the
        # baseline: events are changes after subscribing), None if absent, else its ZnodeStat
        self.last: Any = _UNKNOWN
        self.fired: str | None = None  # the kind of the last firing not yet read back


_UNKNOWN = object()


class _Pending:
    """A firing whose events are known once its re-arming read is back; until then, the
    events fired after it wait behind it."""

    __slots__ = ("watch", "events")

    def __init__(self, watch: _Watch) -> None:
        self.watch = watch
        self.events: list[NodeEvent] | None = None


class Watches:
    """The subscribed paths' watches: armed on subscribe, re-armed on every (re)connection
    (``rearm``), through ``session``; their events go out through ``emit``."""

    def __init__(self, session: KazooSession, emit: Callable[[DriverEvent], None]) -> None:
        self._session = session
        self._send_event = emit
        self._watches: dict[str, _Watch] = {}
        # unsubscribed paths whose server watch is still set (ZooKeeper cannot remove one):
        # subscribed again before it fires, the same watch serves, with no second watcher
        # (whose firing kazoo's thread would run too) and no request
        self.idle: dict[str, _Watch] = {}
        self._held: deque[_Pending | NodeEvent] = deque()  # in the server's order

    def started(self, path: str) -> None:
        idle = self.idle.pop(path, None)
        if idle is not None and idle.armed and not idle.arming:
            idle.active = True  # set on the server since its last read: nothing was missed
            self._watches[path] = idle
            return
        watch = _Watch(path)
        self._watches[path] = watch
        if self._session.connected:
            self._arm(watch)

    def stopped(self, path: str) -> None:
        watch = self._watches.pop(path, None)
        if watch is not None:
            watch.active = False  # its firing is ignored, unless subscribed again by then
            if watch.armed:
                self.idle[path] = watch

    def rearm(self) -> None:
        for watch in self._watches.values():
            if not watch.armed:
                self._arm(watch)

    def down(self) -> None:
        for watch in self._watches.values():
            watch.armed = watch.arming = False
        self.idle.clear()
        self._release_held()

    def changed(self) -> None:
        # what fired before a disconnection is delivered before it; a firing not read back
        # yet is reported by the read of the next connection (its ``fired`` is kept)
        self._release_held()

    def _release_held(self) -> None:
        for item in self._held:
            if isinstance(item, _Pending) and item.events is None:
                item.events = []
        self._flush()

    def _send(self, event: NodeEvent) -> None:
        if self._held:
            self._held.append(event)
        else:
            self._send_event(event)

    def _resolve(self, watch: _Watch, events: list[NodeEvent]) -> None:
        """Put the events of ``watch``'s oldest firing not read back in its place."""
        for item in self._held:
            if isinstance(item, _Pending) and item.watch is watch and item.events is None:
                item.events = events
                self._flush()
                return
        for event in events:
            self._send(event)

    def _flush(self) -> None:
        held = self._held
        while held:
            item = held[0]
            if isinstance(item, _Pending):
                if item.events is None:
                    return
                held.popleft()
                for event in item.events:
                    self._send_event(event)
            else:
                held.popleft()
                self._send_event(item)

    def _arm(self, watch: _Watch) -> None:
        if watch.arming:
            watch.again = True
            return
        client = self._session.client
        if client is None or not watch.active:
            return
        watch.arming = True
        watch.again = False

        @inline
        def fired(event: Any) -> None:  # kazoo's connection thread
            self._session.post(functools.partial(self._fired, watch, getattr(event, "type", None)))

        @inline
        def replied(result: Any) -> None:  # kazoo's connection thread
            self._session.post(functools.partial(self._armed, watch, result))

        try:
            client.exists_async(self._session.abs(watch.path), watch=fired).rawlink(replied)
        except Exception:
            watch.arming = False
            log.warning("could not watch %s", watch.path, exc_info=True)

    def _fired(self, watch: _Watch, kind: str | None) -> None:
        watch.armed = False
        if not watch.active or self._session.closing:
            if self.idle.get(watch.path) is watch:
                del self.idle[watch.path]
            return
        # A deletion is reported at once (a lock's deletion is what a standby waits for): the
        # re-arming read then reports a re-creation against a known absence. Anything else is
        # reported after the read, so that the watch is set again before the subscriber can
        # react (and a change it then makes is not missed).
        if kind == EventType.DELETED and watch.last is not None and watch.last is not _UNKNOWN:
            watch.last = None
            self._send(NodeEvent(watch.path, NodeEventKind.DELETED))
        else:
            watch.fired = kind
            self._held.append(_Pending(watch))
        self._arm(watch)
        self._settle(watch)

    def _armed(self, watch: _Watch, result: Any) -> None:
        watch.arming = False
        if not watch.active or self._session.closing:
            self._resolve(watch, [])
            return
        try:
            stat = result.get_nowait()
        except kx.KazooException:
            watch.armed = False  # re-armed on the next (re)connection
            self._resolve(watch, [])
        else:
            watch.armed = True
            self._resolve(watch, [NodeEvent(watch.path, k) for k in self._diff(watch, stat)])
        if watch.again and self._session.connected:
            self._arm(watch)
        self._settle(watch)

    def _settle(self, watch: _Watch) -> None:
        # no read in flight to answer them: a firing's kind stays in ``fired``, for the next
        if not watch.arming:
            while any(
                isinstance(i, _Pending) and i.watch is watch and i.events is None
                for i in self._held
            ):
                self._resolve(watch, [])

    def _diff(self, watch: _Watch, stat: Any) -> list[NodeEventKind]:
        before, watch.last = watch.last, stat
        fired, watch.fired = watch.fired, None
        if before is _UNKNOWN:
            return []
        events: list[NodeEventKind] = []
        if before is None and stat is None and fired == EventType.CREATED:
            # created and deleted again before this read (a leader's node spoiled the moment
            # it was published): the subscriber must hear of it, to put back what it owns
            events = [NodeEventKind.CREATED, NodeEventKind.DELETED]
        elif before is None and stat is not None:
            events = [NodeEventKind.CREATED]
        elif before is not None and stat is None:
            events = [NodeEventKind.DELETED]
        elif before is not None and stat is not None:
            if stat.czxid != before.czxid:  # replaced while the watch was down
                events = [NodeEventKind.DELETED, NodeEventKind.CREATED]
            elif stat.mzxid != before.mzxid:
                events = [NodeEventKind.CHANGED]
        return events
