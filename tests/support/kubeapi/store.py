"""The fake API server's storage: objects, one global resourceVersion, and watch histories.

As in a real cluster (where the resourceVersion is etcd's revision), every write of any object
takes the next number of one counter, and that number appears on the object, on lists and on
watch events. Clients must treat it as opaque; the fake only promises it increases.

Watches resume from a resourceVersion out of a history kept **per resource** (ConfigMaps,
Leases...), as kube-apiserver's watch cache keeps one per resource
(staging/src/k8s.io/apiserver/pkg/storage/cacher/watch_cache.go, ``watchCache``):

- a buffer of ``capacity`` events, ``least`` at first (the real ``defaultLowerBoundCapacity``,
  100). Full, it doubles (up to ``most``) if its oldest event is younger than ``fresh``
  seconds (``eventFreshDuration``, 75 s), halves (down to ``least``) if its newest quarter is
  older than that (``resizeCacheLocked``), and otherwise drops its oldest event;
- a watch from version ``rv`` gets every event after it, or 410 Expired "too old resource
  version: rv (oldest-1)" if ``rv < oldest - 1`` (``getAllEventsSinceLocked``), where
  ``oldest`` is the first kept event once one was dropped, else one past the version the
  history started at (its ``listResourceVersion``: the server's start, or a ``compact()``,
  which forgets as a watch cache that re-lists does).

So Lease renewals never push the tree's ConfigMap events out, as on a real server. The real
upper bound is 102,400 events; the fake keeps ``most`` (1000 by default) to bound its memory
(a watch further behind gets 410, which every client must handle anyway).

With a state file, every write is appended to it before it is answered, so a killed server
started again on the same file keeps its objects and its counter, like a control plane whose
etcd survives. The histories do not survive: after a restart only watches from the current
resourceVersion can resume, older ones get 410, as after a real apiserver restart.

One lock (``cond``) guards everything; the REST layer holds it across check-then-write, and
watches wait on it for new events.
"""

from __future__ import annotations

import copy
import json
import os
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

__all__ = ("Event", "Key", "Store", "TooOld", "Window")

Key = tuple[str, str, str]  # (resource key "group/plural", namespace or "", name)


@dataclass(frozen=True)
class Event:
    rv: int
    type: str  # ADDED, MODIFIED, DELETED
    key: Key
    object: dict[str, Any]
    previous: dict[str, Any] | None  # the object before a MODIFIED (selectors need both)
    at: float = 0.0  # when it was written (monotonic): its age decides the window's size


@dataclass
class Window:
    """One resource's watch history (see the module's docstring)."""

    floor: int  # the version it starts after (the server's start, or the last compaction)
    capacity: int
    events: deque[Event] = field(default_factory=deque)
    dropped: bool = False  # an event was dropped since ``floor`` (removedEventSinceRelist)

    def oldest(self) -> int:
        """The version of the oldest event a watch could still be sent."""
        if self.dropped and self.events:
            return self.events[0].rv
        return self.floor + 1


class TooOld(Exception):
    """A resourceVersion older than the kept history (``oldest``: the oldest version a watch
    may resume from, the number the real server's message shows)."""

    def __init__(self, requested: int, oldest: int) -> None:
        super().__init__(requested, oldest)
        self.requested = requested
        self.oldest = oldest


def now_timestamp() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Store:
    def __init__(
        self,
        path: Path | None = None,
        history: int = 100,
        history_max: int = 1000,
        fresh: float = 75.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.cond = threading.Condition(threading.RLock())
        self.path = path
        self.rv = 1
        self.objects: dict[Key, dict[str, Any]] = {}
        self.least, self.most, self.fresh = history, max(history, history_max), fresh
        self.clock = clock  # an event's age decides its window's size
        self.windows: dict[str, Window] = {}  # by resource key
        self.compacted = 1  # where a history that starts now starts (start or compaction)
        self._log: TextIO | None = None
        if path is not None:
            self._open(path)

    # reads (callers hold cond)

    def get(self, key: Key) -> dict[str, Any] | None:
        obj = self.objects.get(key)
        return copy.deepcopy(obj) if obj is not None else None

    def select(self, resource_key: str, namespace: str | None) -> list[dict[str, Any]]:
        """Objects of one resource (in one namespace, or all), sorted as etcd keys are."""
        found = [
            copy.deepcopy(obj)
            for (res, ns, _), obj in sorted(self.objects.items())
            if res == resource_key and (namespace is None or ns == namespace)
        ]
        return found

    def window(self, resource_key: str) -> Window:
        window = self.windows.get(resource_key)
        if window is None:
            window = self.windows[resource_key] = Window(self.compacted, self.least)
        return window

    def since(self, resource_key: str, rv: int) -> list[Event]:
        """The resource's events after ``rv``; TooOld if some of them are no longer kept."""
        window = self.window(resource_key)
        oldest = window.oldest()
        if rv < oldest - 1:
            raise TooOld(rv, oldest - 1)
        return [event for event in window.events if event.rv > rv]

    # writes (callers hold cond)

    def create(self, key: Key, obj: dict[str, Any]) -> dict[str, Any]:
        metadata = obj["metadata"]
        metadata["uid"] = str(uuid.uuid4())
        metadata["creationTimestamp"] = now_timestamp()
        return self._write("ADDED", key, obj, None)

    def update(self, key: Key, obj: dict[str, Any]) -> dict[str, Any]:
        previous = self.objects[key]
        return self._write("MODIFIED", key, obj, previous)

    def delete(self, key: Key) -> dict[str, Any]:
        obj = copy.deepcopy(self.objects[key])
        return self._write("DELETED", key, obj, None)

    def compact(self, upto: int | None = None) -> int:
        """Forget every history up to ``upto`` (default: all of it), as a watch cache that
        re-lists at that version does; the oldest version a watch may resume from."""
        upto = self.rv if upto is None else min(upto, self.rv)
        self.compacted = max(self.compacted, upto)
        for window in self.windows.values():
            first = window.oldest() - 1
            while window.events and window.events[0].rv <= upto:
                window.events.popleft()
            window.floor, window.dropped = max(first, upto), False
        self.cond.notify_all()
        return self.compacted

    def _remember(self, event: Event) -> None:
        """Keep ``event`` in its resource's window (watch_cache.go ``updateCache``)."""
        window = self.window(event.key[0])
        events = window.events
        if len(events) >= window.capacity:
            quarter = events[len(events) - max(1, window.capacity // 4)]
            if event.at - events[0].at < self.fresh and window.capacity < self.most:
                window.capacity = min(window.capacity * 2, self.most)
            elif event.at - quarter.at > self.fresh and window.capacity > self.least:
                window.capacity = max(window.capacity // 2, self.least)
        while len(events) >= window.capacity:
            events.popleft()
            window.dropped = True
        events.append(event)

    def _write(
        self, kind: str, key: Key, obj: dict[str, Any], previous: dict[str, Any] | None
    ) -> dict[str, Any]:
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        if kind == "DELETED":
            del self.objects[key]
        else:
            self.objects[key] = obj
        event = Event(self.rv, kind, key, copy.deepcopy(obj), previous, self.clock())
        self._remember(event)
        self._save(kind, key, obj)
        self.cond.notify_all()
        return copy.deepcopy(obj)

    # the state file: a snapshot line, then one line per write (appending costs one object,
    # where rewriting the file would cost them all); rewritten as one snapshot at each start

    def _save(self, kind: str, key: Key, obj: dict[str, Any]) -> None:
        if self._log is None:
            return
        record = {"rv": self.rv, "key": list(key), "deleted": kind == "DELETED", "object": obj}
        self._log.write(json.dumps(record) + "\n")
        self._log.flush()  # in the page cache, so a SIGKILL loses nothing (no fsync: no crash)

    def _open(self, path: Path) -> None:
        if path.exists():
            for number, line in enumerate(path.read_text().splitlines()):
                try:
                    record = json.loads(line)
                except ValueError:  # a line cut short by a kill: its write was never answered
                    if number == 0:
                        raise ValueError("its first line is not a snapshot") from None
                    continue
                if number == 0:
                    self.rv = int(record["resourceVersion"])
                    self.objects = {(r, ns, name): obj for r, ns, name, obj in record["objects"]}
                    continue
                self.rv = int(record["rv"])
                key = (record["key"][0], record["key"][1], record["key"][2])
                if record["deleted"]:
                    self.objects.pop(key, None)
                else:
                    self.objects[key] = record["object"]
            self.compacted = self.rv
        snapshot = {
            "resourceVersion": self.rv,
            "objects": [[*key, obj] for key, obj in self.objects.items()],
        }
        temporary = path.with_name(path.name + ".tmp")
        temporary.write_text(json.dumps(snapshot) + "\n")
        os.replace(temporary, path)
        self._log = open(path, "a")  # kept open for the life of the process
